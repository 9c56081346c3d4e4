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
each source once and recompute only the decoder, so that recipe is timed too
(`EncodeOnceEngine`), and the cache's speed-up is given against both.
"""

from __future__ import annotations

import argparse
import statistics

import keras
import numpy as np

from benchmarks.alternating import alternate, describe, median_ratio
from kbert import build_transformer_model, generate
from kbert.generation.engines import CachedEngine
from kbert.generation.search import Search
from kbert.models.registry import resolve


class EncodeOnceEngine(CachedEngine):
    """bert4keras's T5 recipe: each source encoded once, the whole decoder sequence recomputed every step.

    The step is the cached engine's, on every decoder token so far with an
    empty self-attention cache; the encoder's state is kept.
    """

    def start(self, prompts, segments):
        self.rows = [[self.start_id] for _ in prompts]
        return super().start(prompts, segments)  # encodes each source; the decoder has its one start token

    def extend(self, tokens, parents):
        import tensorflow as tf

        source = {key: value for key, value in self.state.items() if key != "self"}
        self.state = tf.nest.map_structure(lambda tensor: tf.gather(tensor, parents), source)
        self.rows = [self.rows[parent] + [int(token)] for parent, token in zip(parents, tokens)]
        ids = np.array(self.rows, dtype=np.int32)
        rows, length = ids.shape
        allowed = np.broadcast_to(np.tril(np.ones((length, length), dtype=bool)), (rows, length, length)).copy()
        if self.start_id == 0:
            allowed[:, 1:, 0] = False  # as the model hides its padding id
        positions = np.broadcast_to(np.arange(length, dtype=np.int32), ids.shape)
        outputs, _ = self.graph.step(tf.constant(ids), tf.zeros_like(ids), tf.constant(positions),
                                     tf.constant(allowed), tf.fill([rows], length - 1),
                                     {**self.state, "self": self.graph.empty_caches(rows, length)})
        return self._log_probs(outputs)


def encode_once(model, sources, new_tokens: int, start_id: int):
    """Greedy tokens from `EncodeOnceEngine`."""
    engine = EncodeOnceEngine(model, new_tokens, start_id)
    return Search(-1, new_tokens, 0, engine.graph.config.pad_token_id).one_path(engine, sources, [[0] * len(row) for row in sources], None)


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
    recipes = {"cached": "cached", "whole": "recomputed"}
    if seq2seq:
        # "decoder recomputed": bert4keras's recipe, each source encoded once.
        recipes = {"cached": "cached", "encode_once": "decoder recomputed", "whole": "whole model recomputed"}
    baselines = [name for name in recipes if name != "cached"]
    print("| batch | " + " | ".join(f"{label} tokens/s" for label in recipes.values()) + " | "
          + " | ".join(f"speed-up over {recipes[name]} (median, range of rounds)" for name in baselines)
          + " | same tokens |")
    print("|---:|" + "---:|" * (len(recipes) + len(baselines)) + ":---:|")
    for batch in args.batch:
        # Ordinary tokens of a Chinese vocabulary (past the special ones), within the model's vocabulary.
        vocab = config.vocab_size
        sources = rng.integers(min(106, vocab // 2), min(7000, vocab), size=(batch, args.source)).tolist()
        outputs = {}
        runs = {"cached": lambda: generate(model, sources, max_new_tokens=args.new, end_id=-1, **start),
                "whole": lambda: generate(model, sources, max_new_tokens=args.new, end_id=-1, use_cache=False,
                                          **start),
                "encode_once": lambda: encode_once(model, sources, args.new, start.get("start_id"))}

        def timed(name):
            return lambda: outputs.__setitem__(name, runs[name]())

        for name in recipes:  # warm-up: each compiled step is traced once
            timed(name)()
        seconds = alternate({name: timed(name) for name in recipes}, args.rounds)
        tokens = batch * args.new
        rates = [f"{tokens / statistics.median(seconds[name]):.1f}" for name in recipes]
        ratios = [describe(median_ratio(seconds[name], seconds["cached"])) for name in baselines]
        same = all(outputs[name] == outputs["cached"] for name in recipes)
        print(f"| {batch} | " + " | ".join(rates + ratios) + f" | {same} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
