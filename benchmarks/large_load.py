"""Peak memory while loading a large safetensors checkpoint, against the weights' own size.

    python -m benchmarks.large_load write DIR [--max-shard-size 2GB]   # a GPT-2 of GPT2-ML 1.5B's shape
    python -m benchmarks.large_load load DIR [--dtype bfloat16]         # prints one table
    python -m benchmarks.large_load write DIR --config qwen3_embedding_0_6b --dtype bfloat16
    python -m benchmarks.large_load load DIR --config qwen3_embedding_0_6b --dtype bfloat16

`write` builds a GPT-2 with GPT2-ML 1.5B's sizes (48 blocks of width 1,536,
24 heads, feed-forward 6,144, 8,021 tokens, 1,024 positions; GPT2-ML itself
has no Hugging Face names, so GPT-2's layout stands in at the same size) with
random weights and saves it with `save_hf_weights`. `load` runs in a process
of its own: it reads the resident-set size, builds the same model as kbert
builds one to load (`kbert.checkpoints.undrawn`: no random weights drawn),
loads the file with `load_hf_weights`, and prints the peak over the size
before the build, as a multiple of the weights' bytes: what building and
loading the model cost together. `--drawn` builds it with random weights
first, as kbert did before. With `--dtype bfloat16` the model is built
holding its weights in bfloat16 (`build_transformer_model(dtype=...)`,
`kbert predict --dtype`). `--config` builds a bundled config's model instead
(Qwen3-Embedding-0.6B's shape: `write --dtype bfloat16` stores it in
bfloat16, as the hub ships it).
"""

from __future__ import annotations

import argparse
import os
import time

from benchmarks.memory import peak_rss_mib, reset_peak, rss_mib

SHAPE = {"vocab_size": 8021, "hidden_size": 1536, "num_hidden_layers": 48, "num_attention_heads": 24,
         "intermediate_size": 6144, "max_position_embeddings": 1024, "hidden_act": "gelu",
         "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "initializer_range": 0.02}


def _model(dtype: str | None = None, config: str | None = None, undrawn: bool = False):
    import contextlib

    from kbert import build_transformer_model
    from kbert.checkpoints.undrawn import undrawn_weights
    from kbert.models.config import bundled_config_path

    with undrawn_weights() if undrawn else contextlib.nullcontext():
        if config:
            return build_transformer_model(bundled_config_path(config), dtype=dtype)
        return build_transformer_model(dict(SHAPE), model="gpt2", dtype=dtype)


def write(directory: str, max_shard_size: str | None, dtype: str | None = None, config: str | None = None) -> None:
    from kbert import save_hf_weights
    from kbert.checkpoints.hf import parse_size

    model = _model(dtype, config)
    start = time.perf_counter()
    path = save_hf_weights(model, directory, max_shard_size=parse_size(max_shard_size) if max_shard_size else None)
    print(f"wrote {path}: {model.count_params():,} parameters in {time.perf_counter() - start:.0f} s")


def load(directory: str, dtype: str | None, config: str | None = None, drawn: bool = False) -> None:
    import numpy as np

    from kbert import load_hf_weights

    stored_mib = sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory)
                     if name.endswith(".safetensors")) / 2 ** 20
    before = rss_mib()
    reset_peak()
    start = time.perf_counter()
    model = _model(dtype, config, undrawn=not drawn)
    built_at, built = time.perf_counter() - start, rss_mib()
    report = load_hf_weights(model, directory)
    seconds = time.perf_counter() - start
    peak = peak_rss_mib()
    weights_mib = sum(np.dtype(v.dtype).itemsize * int(np.prod(v.shape)) for v in model.weights) / 2 ** 20
    how = "drawn at random, then loaded (before)" if drawn else "built undrawn, each weight read into it (now)"
    print(f"{len(report.loaded)} tensors, {model.count_params():,} parameters, {weights_mib:,.0f} MiB of weights; "
          f"{how}: built in {built_at:.1f} s, built and loaded in {seconds:.1f} s")
    print(f"{'resident before the build':34} {before:10,.0f} MiB")
    print(f"{'resident once built':34} {built:10,.0f} MiB")
    print(f"{'peak while building and loading':34} {peak:10,.0f} MiB")
    extra = peak - before
    print(f"{'peak over before the build':34} {extra:10,.0f} MiB = {extra / weights_mib:.2f}x the weights")
    print(f"{'  the same / the checkpoint':34} {extra / stored_mib:10.2f}x ({stored_mib:,.0f} MiB of safetensors)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["write", "load"])
    parser.add_argument("directory")
    parser.add_argument("--max-shard-size", help="write: shards of at most this size (e.g. 2GB)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"],
                        help="the dtype the model holds (write: the dtype stored)")
    parser.add_argument("--config", help="a bundled config's model (default: GPT2-ML 1.5B's shape)")
    parser.add_argument("--drawn", action="store_true",
                        help="load: build the model with random weights first, as kbert did before")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.action == "write":
        write(args.directory, args.max_shard_size, args.dtype, args.config)
    else:
        load(args.directory, args.dtype, args.config, args.drawn)


if __name__ == "__main__":
    main()
