"""A ModernBERT-base-shaped encoder's forward on one long row: kbert against transformers, in alternating rounds.

    KERAS_BACKEND=torch python -m benchmarks.long_inputs --length 8192 --rounds 3 --hf-python PYTHON_WITH_TRANSFORMERS

Both engines build `configs/modernbert_base.json` with random weights (the same architecture, float32 on the
CPU), each in its own worker process, and warm up with forwards of 1 × `--warmup-length` token ids and one fewer
(TensorFlow's second trace, for any length, is made then; one forward where the warm-up is as long as the row); once
both are ready, each round asks every worker in turn for one forward at `--length` and reports its seconds and
its peak resident memory growth over the forward (Linux's VmHWM, reset before it). transformers runs its
`sdpa` attention, which masks a full length × length matrix on the local layers; kbert computes those layers
window by window. Prints the seconds and the growth per engine and round, the median per-round speed ratio
with its range, the median ratio of the growths with its range and round 1's (the first forward at the length
after a shorter warm-up: the one that allocates; later ones reuse what the allocator kept), and the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from benchmarks.alternating import REPOSITORY, alternate_workers, cpu_name
from benchmarks.memory import peak_rss_mib, reset_peak, rss_mib
CONFIG = os.path.join(REPOSITORY, "configs", "modernbert_base.json")


def _forward(engine: str):
    """`forward(ids)` of the engine's model, built from CONFIG with random weights."""
    if engine == "kbert":
        from kbert import build_transformer_model

        model = build_transformer_model(CONFIG)
        return lambda ids: model.predict_on_batch([ids, np.zeros_like(ids)])
    import torch
    import transformers

    with open(CONFIG, encoding="utf-8") as handle:
        config = transformers.AutoConfig.for_model(**json.load(handle))
    config._attn_implementation = "sdpa"
    model = transformers.ModernBertModel(config).eval()

    def forward(ids):
        with torch.inference_mode():
            return model(input_ids=torch.from_numpy(ids), attention_mask=torch.ones(ids.shape, dtype=torch.long))[0]

    return forward


def worker(engine: str, length: int, warmup: int) -> None:
    """Builds `engine`'s model, warms it up, then answers each line on stdin with one forward's seconds and peak
    memory growth."""
    forward = _forward(engine)
    rng = np.random.default_rng(0)
    for tokens in (warmup, warmup - 1) if warmup != length else (warmup,):
        # TensorFlow traces its graph anew for a second shape (of any length: Keras's reduce_retracing) and not
        # after, so that round 1 times the forward, not a trace, and measures what it allocates
        forward(rng.integers(5, 50000, (1, tokens)).astype(np.int32))
    ids = rng.integers(5, 50000, (1, length)).astype(np.int32)
    print("ready", flush=True)  # no round starts while another worker still loads and warms up
    for _ in sys.stdin:
        reset_peak()
        before = rss_mib()
        start = time.perf_counter()
        forward(ids)
        seconds = time.perf_counter() - start
        print(json.dumps({"seconds": seconds, "growth_mib": peak_rss_mib() - before}), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=8192, help="tokens in the row (default: 8192)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default: 3)")
    parser.add_argument("--warmup-length", type=int, default=512,
                        help="tokens of the warm-up forward (default: 512; JAX compiles for each length: give "
                             "--length to leave the compilation out of the rounds)")
    parser.add_argument("--hf-python", default=sys.executable, help="the Python that runs transformers")
    parser.add_argument("--worker", choices=("kbert", "transformers"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.length, args.warmup_length)
        return 0
    results = alternate_workers("benchmarks.long_inputs", ["--length", str(args.length), "--warmup-length",
                                                           str(args.warmup_length)],
                                {"kbert": sys.executable, "transformers": args.hf_python}, args.rounds)
    print(f"ModernBERT-base shape (configs/modernbert_base.json), 1 x {args.length} tokens, float32; "
          f"{args.rounds} alternating rounds; CPU: {cpu_name()}; kbert on Keras's "
          f"{os.environ.get('KERAS_BACKEND', 'tensorflow')} backend, transformers with sdpa")
    for name, rows in results.items():
        seconds = " ".join(f"{row['seconds']:7.2f}" for row in rows)
        growth = " ".join(f"{row['growth_mib']:7.0f}" for row in rows)
        print(f"{name:<13} seconds by round: {seconds}   peak growth MiB: {growth}")
    speed = [other["seconds"] / mine["seconds"] for mine, other in zip(results["kbert"], results["transformers"])]
    print(f"kbert speed / transformers: {np.median(speed):.2f}x (rounds {min(speed):.2f}-{max(speed):.2f}x)")
    memory = [mine["growth_mib"] / max(other["growth_mib"], 1.0)
              for mine, other in zip(results["kbert"], results["transformers"])]
    print(f"kbert peak growth / transformers: {np.median(memory):.2f}x (rounds {min(memory):.2f}-{max(memory):.2f}x; "
          f"round 1, the first forward at this length after the warm-up: {memory[0]:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
