"""kbert on each Keras backend against keras-hub and transformers: BERT inference and GPT-2 generation.

    python -m benchmarks.backends [--task encode] [--quick] [--rounds 3] [--precisions fp32 bf16] [--json OUT]
    python -m benchmarks.backends --task generate --precisions fp32

A process holds one Keras backend, so each engine (kbert or keras-hub on
tensorflow, jax or torch, and Hugging Face transformers on torch) runs in a
worker process of its own, started once and kept for the whole run. The
rounds alternate: each round asks every worker in turn to time the same
number of forward passes on the same batch (`predict_on_batch` for both
Keras libraries, so both get their backend's compiled predict step), and
the table reports tokens per second as the median over rounds, then each
engine's median ratio to kbert on TensorFlow in fp32, with the range over
rounds.

An engine whose backend or library is not installed is left out and named.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List

from benchmarks.alternating import describe, median_ratio

BACKENDS = ("tensorflow", "jax", "torch")
ENGINES = [f"kbert/{backend}" for backend in BACKENDS] + [f"keras-hub/{backend}" for backend in BACKENDS] \
    + ["transformers/torch"]
BASELINE = "kbert/tensorflow fp32"


# --- worker: one engine in its own process -----------------------------------------------------

def serve(engine: str, task: str, precision: str, config_path: str, batch: int, length: int) -> None:
    """Builds the engine, warms it up, then answers each `N` on stdin with the seconds of N calls."""
    library, _ = engine.split("/")
    _set_keras_precision(precision)
    call = ENGINE_MAKERS[task][library](config_path, precision, batch, length)
    for _ in range(2):  # compilation and first-call allocations are not timed
        call()
    print("ready", flush=True)
    for line in sys.stdin:
        calls = int(line)
        start = time.perf_counter()
        for _ in range(calls):
            call()
        print((time.perf_counter() - start) / calls, flush=True)


def _token_ids(vocab_size: int, batch: int, length: int):
    import numpy as np

    return np.random.default_rng(0).integers(1, vocab_size, size=(batch, length)).astype("int32")


def _config(config_path: str) -> dict:
    with open(config_path, encoding="utf-8") as handle:
        return json.load(handle)


def _set_keras_precision(precision: str) -> None:
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16" if precision == "bf16" else "float32")


def _kbert_encoder(config_path: str, precision: str, batch: int, length: int):
    from kbert import build_transformer_model

    model = build_transformer_model(config_path)
    tokens = _token_ids(_config(config_path)["vocab_size"], batch, length)
    return lambda: model.predict_on_batch([tokens, tokens * 0])


def _keras_hub_encoder(config_path: str, precision: str, batch: int, length: int):
    import keras_hub

    config = _config(config_path)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config["vocab_size"], num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"], hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"], max_sequence_length=config["max_position_embeddings"],
        num_segments=config["type_vocab_size"])
    tokens = _token_ids(config["vocab_size"], batch, length)
    inputs = {"token_ids": tokens, "segment_ids": tokens * 0, "padding_mask": tokens != 0}
    return lambda: backbone.predict_on_batch(inputs)


def _transformers_encoder(config_path: str, precision: str, batch: int, length: int):
    import torch
    import transformers

    config = _config(config_path)
    model = transformers.BertModel(transformers.BertConfig(**config), add_pooling_layer=False).eval()
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    tokens = torch.from_numpy(_token_ids(config["vocab_size"], batch, length)).long()

    def forward():
        with torch.inference_mode():
            return model(input_ids=tokens, token_type_ids=tokens * 0,
                         attention_mask=(tokens != 0).long()).last_hidden_state.float().numpy()

    return forward


def _kbert_generator(config_path: str, precision: str, batch: int, length: int):
    from kbert import build_transformer_model, generate

    model = build_transformer_model(config_path, model="gpt2")
    prompts = _token_ids(_config(config_path)["vocab_size"], batch, length).tolist()
    return lambda: generate(model, prompts, max_new_tokens=NEW_TOKENS, end_id=-1)


def _keras_hub_generator(config_path: str, precision: str, batch: int, length: int):
    import keras_hub
    import numpy as np

    config = _config(config_path)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=config["vocab_size"], num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"], hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"], max_sequence_length=config["max_position_embeddings"])
    causal_lm = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    causal_lm.compile(sampler="greedy")
    # Without a preprocessor, generate fills the positions the padding mask leaves out.
    tokens = np.zeros((batch, length + NEW_TOKENS), "int32")
    tokens[:, :length] = _token_ids(config["vocab_size"], batch, length)
    inputs = {"token_ids": tokens, "padding_mask": tokens != 0}
    return lambda: causal_lm.generate(inputs, stop_token_ids=None)


NEW_TOKENS = 64
ENGINE_MAKERS = {"encode": {"kbert": _kbert_encoder, "keras-hub": _keras_hub_encoder,
                            "transformers": _transformers_encoder},
                 "generate": {"kbert": _kbert_generator, "keras-hub": _keras_hub_generator}}


# --- the run: workers, alternating rounds, the table -------------------------------------------

def installed(engine: str) -> bool:
    library, backend = engine.split("/")
    module = {"kbert": None, "keras-hub": "keras_hub", "transformers": "transformers"}[library]
    return all(importlib.util.find_spec(name) is not None for name in (backend, module) if name)


class Worker:
    """One engine's process; `time(calls)` asks it for the seconds of one call, averaged over `calls`."""

    def __init__(self, engine: str, task: str, precision: str, config_path: str, batch: int, length: int):
        self.name = f"{engine} {precision}"
        env = {**os.environ, "KERAS_BACKEND": engine.split("/")[1], "TF_CPP_MIN_LOG_LEVEL": "3"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.backends", "--worker", engine, "--task", task,
             "--precisions", precision, "--config", config_path, "--batches", str(batch), "--length", str(length)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def ready(self) -> bool:
        line = self.process.stdout.readline().strip()
        if line != "ready":
            print(f"{self.name}: failed to start:\n{self.process.stderr.read()[-2000:]}", file=sys.stderr)
            return False
        return True

    def time(self, calls: int) -> float:
        self.process.stdin.write(f"{calls}\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def run(task: str, config_path: str, batch: int, length: int, rounds: int, calls: int, precisions: List[str],
        wanted: List[str]) -> dict:
    wanted = [engine for engine in wanted if engine.split("/")[0] in ENGINE_MAKERS[task]]
    engines = [engine for engine in wanted if installed(engine)]
    workers = [Worker(engine, task, precision, config_path, batch, length) for precision in precisions
               for engine in engines]
    workers = [worker for worker in workers if worker.ready()]
    seconds: Dict[str, List[float]] = {worker.name: [] for worker in workers}
    try:
        for _ in range(rounds):
            for worker in workers:
                seconds[worker.name].append(worker.time(calls))
    finally:
        for worker in workers:
            worker.close()
    tokens = batch * (NEW_TOKENS if task == "generate" else length)  # new tokens, or tokens read
    rows = {}
    for name, times in seconds.items():
        rows[name] = {"tokens_per_s": tokens / statistics.median(times), "seconds": times}
        if BASELINE in seconds:
            rows[name]["vs_kbert_tf_fp32"] = median_ratio(seconds[BASELINE], times)
    return {"task": task, "config": os.path.basename(config_path), "batch": batch, "length": length,
            "rounds": rounds, "calls_per_round": calls, "engines": rows,
            "not_installed": [engine for engine in wanted if engine not in engines]}


def print_table(results: dict) -> None:
    what = (f"{results['batch']} prompts of {results['length']} tokens, {NEW_TOKENS} new tokens each (greedy)"
            if results["task"] == "generate" else f"{results['batch']} x {results['length']} tokens")
    print(f"\n{results['config']}, {what}; {results['rounds']} alternating rounds of {results['calls_per_round']} "
          "calls each; medians")
    unit = "new tokens/s" if results["task"] == "generate" else "tokens/s"
    print(f"{'engine':32} {unit:>12}  vs kbert/tensorflow fp32")
    for name, row in results["engines"].items():
        ratio = describe(row["vs_kbert_tf_fp32"]) if "vs_kbert_tf_fp32" in row else "-"
        print(f"{name:32} {row['tokens_per_s']:12,.1f}  {ratio}")
    if results["not_installed"]:
        print("not installed: " + ", ".join(results["not_installed"]))


CONFIGS = {"encode": ("bert_base_chinese", "bert_tiny"), "generate": ("gpt2_chinese_base", "gpt2_chinese_base")}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=sorted(ENGINE_MAKERS), default="encode",
                        help="encode: BERT-base 8 x 128 forward passes; generate: GPT-2-base greedy, 32-token "
                             "prompts, 64 new tokens, batch 1 and 8")
    parser.add_argument("--quick", action="store_true", help="encode: bert_tiny, 2 x 16 tokens (a smoke test)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3, help="calls timed per engine per round")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--engines", nargs="+", default=ENGINES, choices=ENGINES)
    parser.add_argument("--batches", type=int, nargs="+", help="batch sizes (encode: 8; generate: 1 and 8)")
    parser.add_argument("--length", type=int, help="tokens a row (encode: 128) or a prompt (generate: 32)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return serve(args.worker, args.task, args.precisions[0], args.config, args.batches[0], args.length)
    from kbert.models.config import bundled_config_path

    config_path = bundled_config_path(CONFIGS[args.task][args.quick])
    quick_encode = args.quick and args.task == "encode"
    batches = args.batches or ([2] if quick_encode else [8] if args.task == "encode" else [1, 8])
    length = args.length or (16 if quick_encode else 128 if args.task == "encode" else 32)
    results = []
    for batch in batches:
        results.append(run(args.task, config_path, batch, length, args.rounds, args.calls, args.precisions,
                           args.engines))
        print_table(results[-1])
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
