"""kbert's benchmark: build, load, inference, training, GEMM peak and MFU, with peers.

    python -m benchmarks.run            # BERT-base (Chinese vocab), with keras-hub / HF if installed
    python -m benchmarks.run --quick    # tiny config, few repetitions (the test suite runs this)
    python -m benchmarks.run --json results.json

Each figure is the median of several repetitions after a warm-up. Engines are
compared in alternating rounds (kbert, keras-hub, ..., then again), and their
ratios are the median of the per-round ratios, with the range, so they come
from the same minutes of the same machine.
Prints a Markdown table; `--json` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks.alternating import alternate, describe, median_ratio  # noqa: E402

import keras  # noqa: E402
from kbert import BertConfig, build_classifier, build_transformer_model, flops_per_token  # noqa: E402
from kbert.models.config import bundled_config_path  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def timed_rounds(engines: Dict[str, Callable[[], object]], rounds: int, warmup: int = 2) -> Dict[str, List[float]]:
    """Seconds per call of each engine per round, after a warm-up, in alternating rounds."""
    for fn in engines.values():
        for _ in range(warmup):
            fn()
    return alternate(engines, rounds)


def best_of(seconds: Dict[str, List[float]], prefix: str) -> str:
    """The faster (by median) of an engine's variants (`kbert`, `kbert XLA`)."""
    variants = [name for name in seconds if name == prefix or name.startswith(prefix + " ")]
    return min(variants, key=lambda name: statistics.median(seconds[name]))


def gemm_flops(m: int, k: int, n: int, repeats: int) -> float:
    """FLOP/s of a float32 `[m, k] @ [k, n]` matmul in TensorFlow."""
    a = tf.random.normal((m, k))
    b = tf.random.normal((k, n))
    # One element back, not the product: copying it to the host would be timed too.
    matmul = tf.function(lambda: tf.matmul(a, b)[0, 0])
    seconds = median_seconds(lambda: matmul().numpy(), repeats, warmup=2)
    return 2 * m * k * n / seconds


def gemm_peak(config: BertConfig, tokens: int, square: int, repeats: int) -> dict:
    """The machine's GEMM speed: a square matmul, and the model's own dense-layer shapes.

    MFU is computed against the fastest of them, the stricter reference.
    """
    h, i = config.hidden_size, config.intermediate_size
    shapes = {f"{square}³": (square, square, square), f"{tokens}×{h}×{h}": (tokens, h, h),
              f"{tokens}×{h}×{i}": (tokens, h, i), f"{tokens}×{i}×{h}": (tokens, i, h)}
    flops = {name: gemm_flops(*shape, repeats) for name, shape in shapes.items()}
    return {"shapes": flops, "peak": max(flops.values())}


def random_batch(config: BertConfig, batch: int, length: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, config.vocab_size, size=(batch, length)).astype("int32")
    return tf.constant(tokens), tf.zeros_like(tokens)


# --- engines -----------------------------------------------------------------------------------

def kbert_inference(config: BertConfig, xla: bool):
    model = build_transformer_model(config)
    call = tf.function(lambda t, s: model([t, s], training=False), jit_compile=xla)
    return lambda t, s: call(t, s).numpy()


def keras_hub_backbone(config: BertConfig):
    import keras_hub

    return keras_hub.models.BertBackbone(
        vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads, hidden_dim=config.hidden_size,
        intermediate_dim=config.intermediate_size, dropout=config.hidden_dropout_prob,
        max_sequence_length=config.max_position_embeddings, num_segments=config.type_vocab_size)


def keras_hub_inference(config: BertConfig, xla: bool):
    backbone = keras_hub_backbone(config)

    def forward(t, s):
        inputs = {"token_ids": t, "segment_ids": s, "padding_mask": tf.not_equal(t, 0)}
        return backbone(inputs, training=False)["sequence_output"]

    call = tf.function(forward, jit_compile=xla)
    return lambda t, s: call(t, s).numpy()


def hf_inference(config: BertConfig):
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count() or 1)
    hf_config = transformers.BertConfig(**config.to_dict())
    model = transformers.BertModel(hf_config, add_pooling_layer=False).eval()

    def run(t, s):
        with torch.inference_mode():
            ids = torch.from_numpy(t.numpy()).long()
            return model(input_ids=ids, token_type_ids=torch.from_numpy(s.numpy()).long(),
                         attention_mask=(ids > 0).long()).last_hidden_state.numpy()
    return run


def kbert_training(config: BertConfig):
    classifier = build_classifier(build_transformer_model(config), num_labels=2)
    classifier.compile(keras.optimizers.AdamW(2e-5), loss="sparse_categorical_crossentropy")
    return lambda t, s, y: classifier.train_on_batch([t, s], y)


def keras_hub_training(config: BertConfig):
    backbone = keras_hub_backbone(config)
    inputs = backbone.input
    cls = keras.layers.Lambda(lambda x: x[:, 0])(backbone(inputs)["sequence_output"])
    model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(cls))
    model.compile(keras.optimizers.AdamW(2e-5), loss="sparse_categorical_crossentropy")
    return lambda t, s, y: model.train_on_batch(
        {"token_ids": t, "segment_ids": s, "padding_mask": tf.not_equal(t, 0)}, y)


def available(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# --- sections ----------------------------------------------------------------------------------

def measure_build(config: BertConfig, repeats: int) -> float:
    def build():
        keras.backend.clear_session()
        build_transformer_model(config)
    return median_seconds(build, repeats, warmup=1)


def measure_load(config_path: str, repeats: int) -> dict:
    """Saves a checkpoint with kbert, then loads it in a fresh process (see checkpoint_load.py)."""
    with tempfile.TemporaryDirectory() as directory:
        prefix = os.path.join(directory, "bert_model.ckpt")
        from kbert import save_google_checkpoint

        save_google_checkpoint(build_transformer_model(config_path, with_nsp=True, with_mlm=True), prefix)
        result = subprocess.run([sys.executable, "-m", "benchmarks.checkpoint_load", prefix, config_path,
                                 str(repeats)], capture_output=True, text=True, cwd=REPO, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def run(quick: bool, peers: bool, repeats: int) -> dict:
    config_path = bundled_config_path("bert_tiny" if quick else "bert_base_chinese")
    config = BertConfig.from_json_file(config_path)
    batch, length = (2, 16) if quick else (8, 128)
    use_hub = peers and available("keras_hub")
    use_hf = peers and available("torch") and available("transformers")
    results: dict = {
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "cpus": os.cpu_count(), "tensorflow": tf.__version__, "keras": keras.__version__},
        "config": os.path.basename(config_path), "batch": batch, "length": length, "repeats": repeats,
    }
    results["build_s"] = measure_build(config, repeats)
    results["load"] = measure_load(config_path, repeats)
    results["gemm"] = gemm_peak(config, batch * length, 512 if quick else 2048, repeats)

    tokens, segments = random_batch(config, batch, length)
    single = (tokens[:1], segments[:1])
    engines = {"kbert": kbert_inference(config, xla=False), "kbert XLA": kbert_inference(config, xla=True)}
    if use_hub:
        engines["keras-hub"] = keras_hub_inference(config, xla=False)
        engines["keras-hub XLA"] = keras_hub_inference(config, xla=True)
    if use_hf:
        engines["HF PyTorch"] = hf_inference(config)
    throughput = timed_rounds({n: (lambda f=f: f(tokens, segments)) for n, f in engines.items()}, repeats)
    latency = timed_rounds({n: (lambda f=f: f(*single)) for n, f in engines.items()}, repeats)
    flops = results["flops_per_token"] = flops_per_token(config, length)
    results["inference"] = {
        name: {"tokens_per_s": batch * length / statistics.median(throughput[name]),
               "latency_ms": 1000 * statistics.median(latency[name]),
               "mfu": batch * length / statistics.median(throughput[name]) * flops / results["gemm"]["peak"],
               # per round: this engine's speed / kbert's
               "ratio_to_kbert": median_ratio(throughput["kbert"], throughput[name])}
        for name in engines}
    if use_hub:
        ours, theirs = best_of(throughput, "kbert"), best_of(throughput, "keras-hub")
        results["versus_keras_hub"] = {
            "kbert": ours, "keras-hub": theirs,
            "throughput": median_ratio(throughput[theirs], throughput[ours]),
            "latency": median_ratio(latency[best_of(latency, "keras-hub")], latency[best_of(latency, "kbert")])}

    labels = tf.constant(np.arange(batch) % 2, dtype=tf.int32)
    trainers = {"kbert": kbert_training(config)}
    if use_hub:
        trainers["keras-hub"] = keras_hub_training(config)
    step = timed_rounds({n: (lambda f=f: f(tokens, segments, labels)) for n, f in trainers.items()}, repeats)
    results["training"] = {name: {"examples_per_s": batch / statistics.median(seconds),
                                  "ratio_to_kbert": median_ratio(step["kbert"], seconds)}
                           for name, seconds in step.items()}
    return results


def markdown(results: dict) -> str:
    load = results["load"]
    lines = [
        f"Config `{results['config']}`, batch {results['batch']} × {results['length']} tokens, "
        f"median of {results['repeats']}; TensorFlow {results['machine']['tensorflow']}, "
        f"Keras {results['machine']['keras']}, {results['machine']['cpus']} CPUs.",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| build (`build_transformer_model`) | {results['build_s']:.2f} s |",
        f"| checkpoint load / raw read of its files | {load['load_s']:.3f} s / {load['raw_read_s']:.3f} s; "
        f"per round {describe(load['load_over_raw'])} |",
        f"| load peak memory above the model / model size | {load['load_peak_extra_mib']:.0f} MiB / "
        f"{load['model_mib']:.0f} MiB; peak with the model {(load['load_peak_extra_mib'] + load['model_mib']) / load['model_mib']:.2f}× |",
    ]
    lines += [f"| GEMM float32 {name} | {value / 1e9:.0f} GFLOP/s |"
              for name, value in results["gemm"]["shapes"].items()]
    lines += [
        "",
        f"Speeds are medians over {results['repeats']} alternating rounds (every engine once per round, in "
        "turn); ratios are the median of the per-round ratios, with their range.",
        "",
        f"MFU: achieved FLOP/s (analytic {results['flops_per_token'] / 1e6:.1f} MFLOP per token) "
        f"÷ the fastest GEMM above ({results['gemm']['peak'] / 1e9:.0f} GFLOP/s).",
        "",
        "| inference | tokens/s | speed / kbert's (per round) | latency 1 seq (ms) | MFU |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in results["inference"].items():
        lines.append(f"| {name} | {row['tokens_per_s']:,.0f} | {describe(row['ratio_to_kbert'])} | "
                     f"{row['latency_ms']:.1f} | {100 * row['mfu']:.0f} % |")
    versus = results.get("versus_keras_hub")
    if versus:
        lines += ["", f"kbert / keras-hub, each at its faster variant ({versus['kbert']}, {versus['keras-hub']}): "
                      f"throughput {describe(versus['throughput'])}; single-sequence speed "
                      f"{describe(versus['latency'])}"]
    lines += ["", "| training step (classifier) | examples/s | speed / kbert's (per round) |", "|---|---:|---:|"]
    for name, row in results["training"].items():
        lines.append(f"| {name} | {row['examples_per_s']:.2f} | {describe(row['ratio_to_kbert'])} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny config, few repetitions")
    parser.add_argument("--no-peers", action="store_true", help="kbert only (no keras-hub / HF)")
    parser.add_argument("--repeats", type=int, help="repetitions per figure (default 7, quick 2)")
    parser.add_argument("--json", help="also write the results as JSON here")
    args = parser.parse_args(argv)
    results = run(args.quick, not args.no_peers, args.repeats or (2 if args.quick else 7))
    print(markdown(results))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
