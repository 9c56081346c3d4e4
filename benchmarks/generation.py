"""Generation speed with the key/value cache against full recomputation, in alternating rounds.

    python -m benchmarks.generation --config configs/bert_base_chinese.json
    python -m benchmarks.generation --config configs/gpt2_chinese_base.json --model gpt2
    python -m benchmarks.generation --config configs/t5_pegasus_base_zh.json --model t5.1.1

A UniLM model of the config (random weights; speed does not depend on them),
for a GPT family (`--model gpt`, `gpt2`, `gpt2_ml`) its language model, or a
whole T5 (`--model t5`, `t5.1.1`, `mt5.1.1`), continues (T5: decodes)
`--batch` sources (prompts) of `--source` tokens by `--new` greedy tokens,
with `generate(use_cache=True)` and `use_cache=False` alternately, and prints
new tokens per second, the median per-round speed-up with its range, and
whether both gave the same tokens. For T5, `use_cache=False` runs the whole
model (encoder and decoder) on every step; bert4keras's T5 scripts encode
the source once and recompute only the decoder, so their cost lies between.
"""

from __future__ import annotations

import argparse
import statistics

import keras
import numpy as np

from benchmarks.alternating import alternate, describe, median_ratio
from kbert import build_transformer_model, generate
from kbert.models.registry import resolve


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/bert_base_chinese.json")
    parser.add_argument("--model", default=None, help="the family (default: the config's model_type, else bert)")
    parser.add_argument("--source", type=int, default=64, help="source tokens (default: 64)")
    parser.add_argument("--new", type=int, default=64, help="generated tokens (default: 64)")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8], help="batch sizes (default: 1 8)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (default: 7)")
    args = parser.parse_args(argv)
    keras.utils.set_random_seed(0)
    family, config = resolve(args.config, args.model)
    seq2seq = getattr(family, "part", None) == "both"  # a whole T5
    causal = family.default_application == "lm"  # the GPT families: language models by construction
    model = build_transformer_model(args.config, model=args.model, **({} if causal or seq2seq else
                                                                      {"application": "unilm", "with_mlm": True}))
    rng = np.random.default_rng(0)
    kind = f"{family.name} " + ("encoder-decoder" if seq2seq else "LM" if causal else "UniLM")
    # T5's decoder starts from a given token (any but padding: speed does not depend on it).
    start = {"start_id": 1} if seq2seq else {}
    print(f"{args.config}, {kind}, {model.count_params():,} parameters; source {args.source} tokens, "
          f"{args.new} new tokens (greedy), {args.rounds} alternating rounds, keras {keras.__version__}\n")
    print("| batch | cached tokens/s | recomputed tokens/s | speed-up (median of rounds) | same tokens |")
    print("|---:|---:|---:|---:|:---:|")
    for batch in args.batch:
        # Ordinary tokens of a Chinese vocabulary (past the special ones), within the model's vocabulary.
        vocab = config.vocab_size
        sources = rng.integers(min(106, vocab // 2), min(7000, vocab), size=(batch, args.source)).tolist()
        outputs = {}

        def run(use_cache: bool):
            outputs[use_cache] = generate(model, sources, max_new_tokens=args.new, end_id=-1, use_cache=use_cache,
                                          **start)

        run(True), run(False)  # warm-up: each compiled step is traced once
        seconds = alternate({True: lambda: run(True), False: lambda: run(False)}, args.rounds)
        ratio = median_ratio(seconds[False], seconds[True])
        tokens = batch * args.new
        print(f"| {batch} | {tokens / statistics.median(seconds[True]):.1f} | "
              f"{tokens / statistics.median(seconds[False]):.1f} | {describe(ratio)} | "
              f"{outputs[True] == outputs[False]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
