"""kbert on each Keras backend against keras-hub and transformers: BERT inference and training, GPT-2 generation.

    python -m benchmarks.backends [--task encode] [--quick] [--rounds 3] [--precisions fp32 bf16] [--json OUT]
    python -m benchmarks.backends --task train --batches 32
    python -m benchmarks.backends --task generate --precisions fp32
    python -m benchmarks.backends --task beam --precisions fp32 --engines kbert/jax kbert-python/jax keras-hub/jax
    python -m benchmarks.backends --task sample --precisions fp32 --engines kbert/jax kbert-python/jax keras-hub/jax
    python -m benchmarks.backends --task finetune --precisions fp32 --calls 1
    python -m benchmarks.backends --engines kbert/jax kbert-einsum/jax kbert/torch kbert-fused/torch  # fused or not
    python -m benchmarks.backends --baseline "keras-hub/jax fp32" --peak-tflops tf32=494.7 bf16=989.4   # a GPU

A process holds one Keras backend, so each engine (kbert or keras-hub on
tensorflow, jax or torch, and Hugging Face transformers on torch) runs in a
worker process of its own, started once and kept for the whole run. The
rounds alternate: each round asks every worker in turn to time the same
number of forward passes on the same batch (`predict_on_batch` for both
Keras libraries, so both get their backend's compiled predict step), and
the table reports tokens per second as the median over rounds, then each
engine's median ratio to kbert on TensorFlow in fp32, with the range over
rounds. `train` times one optimizer step of a two-label classifier on `[CLS]`
(kbert's `build_classifier`, keras-hub's `BertTextClassifier`, transformers'
`BertForSequenceClassification`, each with AdamW). `finetune` times one
epoch of fine-tuning on real reviews (`../shared/data/sentiment`), each
library as its users feed it: kbert through its bucketed pipeline (each batch
padded to its longest row, rounded up to 16), keras-hub's
`BertTextClassifier` with its preprocessor's fixed `sequence_length`; both
read the same token ids (kbert's WordPiece on the Chinese vocabulary, cut at
the same maxlen). Encode and train rows also
give the model's arithmetic rate (matmul FLOPs counted from the config; a
training step is three forward passes' worth) and, given the device's peak
(`--peak-tflops`), the model FLOP utilisation (MFU).

An engine whose backend or library is not installed is left out and named.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

from benchmarks.alternating import describe, median_ratio

BACKENDS = ("tensorflow", "jax", "torch")
ENGINES = [f"kbert/{backend}" for backend in BACKENDS] + [f"keras-hub/{backend}" for backend in BACKENDS] \
    + ["transformers/torch"]
# kbert with its attention's einsums and softmax where it would call ops.dot_product_attention, and with
# ops.dot_product_attention where it would not (encode only).
# kbert-fused trains without attention dropout, so that training too takes the fused path.
ATTENTION_ENGINES = ["kbert-einsum/jax", "kbert-einsum/torch", "kbert-fused/torch", "kbert-fused/jax"]
# kbert's encoder returning [CLS] vectors alone (encode); generation with caches sized in steps of 16 (generate);
# kbert trained as `--remat` trains (train).
VARIANT_ENGINES = ["kbert-cls/jax", "kbert-slots16/jax", "kbert-remat/jax", "kbert-remat/torch"]
# kbert's beam search and sampling with their loops in Python, not compiled (the beam and sample tasks).
SEARCH_ENGINES = [f"kbert-python/{backend}" for backend in BACKENDS]
BASELINE = "kbert/tensorflow fp32"


# --- worker: one engine in its own process -----------------------------------------------------

def serve(engine: str, task: str, precision: str, config_path: str, batch: int, length: int) -> None:
    """Builds the engine, warms it up, then answers each `N` on stdin with the seconds of N calls, and
    `memory` with the process's peak memory in MiB."""
    library, _ = engine.split("/")
    _set_keras_precision(precision)
    call = ENGINE_MAKERS[task][library](config_path, precision, batch, length)
    for _ in range(2):  # compilation and first-call allocations are not timed
        call()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "memory":
            print(_peak_memory_mib(), flush=True)
            continue
        calls = int(line)
        start = time.perf_counter()
        for _ in range(calls):
            call()
        print((time.perf_counter() - start) / calls, flush=True)


def _peak_memory_mib() -> float:
    """The peak memory of this worker: its GPU's allocator peak where it runs on one, else its resident set."""
    backend = os.environ.get("KERAS_BACKEND")
    if backend == "jax":
        import jax

        stats = jax.devices()[0].memory_stats() or {}
        if "peak_bytes_in_use" in stats:
            return stats["peak_bytes_in_use"] / 2 ** 20
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            return torch.cuda.max_memory_allocated() / 2 ** 20
    from benchmarks.memory import peak_rss_mib

    return peak_rss_mib()


def _token_ids(vocab_size: int, batch: int, length: int):
    import numpy as np

    return np.random.default_rng(0).integers(1, vocab_size, size=(batch, length)).astype("int32")


def _config(config_path: str) -> dict:
    with open(config_path, encoding="utf-8") as handle:
        return json.load(handle)


def _set_keras_precision(precision: str) -> None:
    """fp32 is float32 arithmetic throughout; tf32 lets GPU matmuls round their inputs to TensorFloat-32
    (JAX's and TensorFlow's own default on a GPU, not PyTorch's); bf16 is Keras's mixed_bfloat16."""
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16" if precision == "bf16" else "float32")
    backend = keras.backend.backend()
    tf32 = precision != "fp32"
    if backend == "jax":
        import jax

        jax.config.update("jax_default_matmul_precision", "tensorfloat32" if tf32 else "float32")
    elif backend == "torch":
        import torch

        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    elif backend == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(tf32)


def _kbert_encoder(config_path: str, precision: str, batch: int, length: int, first_token_only: bool = False):
    """BERT's hidden states, or (`first_token_only`) its [CLS] vectors alone, as a classifier or an embedding
    server reads them: then the device sends back a vector a row, not the whole sequence."""
    import keras

    from kbert import build_transformer_model

    model = build_transformer_model(config_path)
    if first_token_only:
        model = keras.Model(model.inputs, model.output[:, 0])
    tokens = _token_ids(_config(config_path)["vocab_size"], batch, length)
    return lambda: model.predict_on_batch([tokens, tokens * 0])


def _kbert_encoder_attending(fused_backends: tuple):
    """kbert's encoder with its attention through `ops.dot_product_attention` on the given backends only
    (`()`: the einsums and softmax everywhere): what the fused kernel is measured against."""

    def make(config_path: str, precision: str, batch: int, length: int):
        from kbert.layers import attention

        attention.FUSED_BACKENDS = fused_backends
        return _kbert_encoder(config_path, precision, batch, length)

    return make


def _keras_hub_backbone(config: dict):
    import keras_hub

    return keras_hub.models.BertBackbone(
        vocabulary_size=config["vocab_size"], num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"], hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"], max_sequence_length=config["max_position_embeddings"],
        num_segments=config["type_vocab_size"])


def _keras_hub_inputs(config: dict, batch: int, length: int) -> dict:
    tokens = _token_ids(config["vocab_size"], batch, length)
    return {"token_ids": tokens, "segment_ids": tokens * 0, "padding_mask": tokens != 0}


def _keras_hub_encoder(config_path: str, precision: str, batch: int, length: int):
    config = _config(config_path)
    backbone, inputs = _keras_hub_backbone(config), _keras_hub_inputs(config, batch, length)
    return lambda: backbone.predict_on_batch(inputs)


def _torch_device():
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _transformers_inputs(config: dict, batch: int, length: int) -> dict:
    import torch

    tokens = torch.from_numpy(_token_ids(config["vocab_size"], batch, length)).long().to(_torch_device())
    return {"input_ids": tokens, "token_type_ids": tokens * 0, "attention_mask": (tokens != 0).long()}


def _transformers_encoder(config_path: str, precision: str, batch: int, length: int):
    import torch
    import transformers

    config = _config(config_path)
    model = transformers.BertModel(transformers.BertConfig(**config), add_pooling_layer=False).eval()
    model = model.to(_torch_device(), torch.bfloat16 if precision == "bf16" else torch.float32)
    inputs = _transformers_inputs(config, batch, length)

    def forward():
        with torch.inference_mode():
            return model(**inputs).last_hidden_state.float().cpu().numpy()

    return forward


def _labels(batch: int):
    import numpy as np

    return np.arange(batch, dtype="int32") % 2


def _adamw():
    import keras

    return keras.optimizers.AdamW(learning_rate=2e-5)


def _kbert_train_step(config_path: str, precision: str, batch: int, length: int, attention_dropout: bool = True,
                      remat: bool = False):
    """`attention_dropout` False: the config's attention dropout set to 0, so that training too goes through
    `ops.dot_product_attention` (a fused kernel on a GPU), as recipes without attention dropout train;
    `remat`: built as `kbert train --remat` builds it (the feed-forward layers recompute)."""
    from kbert import BertConfig, TrainingOptions, build_transformer_model
    from kbert.builder import build_classifier
    from kbert.training.loop import remat_scope

    config = _config(config_path)
    if not attention_dropout:
        config["attention_probs_dropout_prob"] = 0.0
    with remat_scope(TrainingOptions(remat=remat), BertConfig.from_dict(config)):
        model = build_classifier(build_transformer_model(config), 2)
    model.compile(optimizer=_adamw(), loss="sparse_categorical_crossentropy")
    tokens, labels = _token_ids(_config(config_path)["vocab_size"], batch, length), _labels(batch)
    return lambda: model.train_on_batch([tokens, tokens * 0], labels)


def _keras_hub_train_step(config_path: str, precision: str, batch: int, length: int):
    import keras
    import keras_hub

    classifier = keras_hub.models.BertTextClassifier(
        _keras_hub_backbone(_config(config_path)), num_classes=2, preprocessor=None)
    classifier.compile(optimizer=_adamw(), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    inputs, labels = _keras_hub_inputs(_config(config_path), batch, length), _labels(batch)
    return lambda: classifier.train_on_batch(inputs, labels)


def _transformers_train_step(config_path: str, precision: str, batch: int, length: int):
    import torch
    import transformers

    config = _config(config_path)
    model = transformers.BertForSequenceClassification(transformers.BertConfig(**config, num_labels=2))
    model = model.to(_torch_device()).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    inputs = _transformers_inputs(config, batch, length)
    labels = torch.from_numpy(_labels(batch)).long().to(_torch_device())

    def step():
        optimizer.zero_grad()
        # bf16 as Keras's mixed_bfloat16 runs it: float32 weights, bfloat16 arithmetic
        with torch.autocast(_torch_device(), torch.bfloat16, enabled=precision == "bf16"):
            loss = model(**inputs, labels=labels).loss
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.pardir, "shared")
REVIEWS = 512  # a fine-tuning pass: the first reviews of the sentiment corpus's training split


def _reviews(maxlen: int) -> tuple:
    """The first `REVIEWS` reviews of `../shared/data/sentiment` as (token ids, segment ids) pairs, and labels,
    read and encoded as `kbert train` reads and encodes them."""
    import numpy as np

    from kbert import Tokenizer
    from kbert.training.data import encode_examples, read_examples

    corpus = os.path.join(SHARED, "data", "sentiment", "sentiment.train.data")
    if not os.path.exists(corpus):
        raise SystemExit(f"finetune reads real reviews from {os.path.normpath(corpus)}, which is missing: "
                         "run it from a checkout with ../shared beside it")
    examples = read_examples(corpus)[0][:REVIEWS]
    tokenizer = Tokenizer(os.path.join(SHARED, "vocab", "chinese_vocab.txt"))
    return encode_examples(tokenizer, examples, maxlen), np.array([int(example.label) for example in examples])


def _kbert_fine_tuning(config_path: str, precision: str, batch: int, length: int):
    from kbert import build_transformer_model
    from kbert.builder import build_classifier
    from kbert.training.pipeline import make_dataset

    model = build_classifier(build_transformer_model(config_path), 2)
    model.compile(optimizer=_adamw(), loss="sparse_categorical_crossentropy")
    encoded, labels = _reviews(length)
    dataset = make_dataset(encoded, labels, batch, shuffle=True, bucketing=True)
    return lambda: model.fit(dataset, epochs=1, verbose=0)


def _keras_hub_fine_tuning(config_path: str, precision: str, batch: int, length: int):
    import keras
    import keras_hub
    import numpy as np

    classifier = keras_hub.models.BertTextClassifier(
        _keras_hub_backbone(_config(config_path)), num_classes=2, preprocessor=None)
    classifier.compile(optimizer=_adamw(), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    encoded, labels = _reviews(length)
    tokens = np.zeros((len(encoded), length), "int32")  # BertTextClassifierPreprocessor(sequence_length=length)
    for row, (ids, _) in zip(tokens, encoded):
        row[:len(ids)] = ids
    inputs = {"token_ids": tokens, "segment_ids": tokens * 0, "padding_mask": tokens != 0}
    return lambda: classifier.fit(inputs, labels, batch_size=batch, epochs=1, shuffle=True, verbose=0)


def _kbert_generator(config_path: str, precision: str, batch: int, length: int, beams: int = 1,
                     compiled: bool = True, top_k: Optional[int] = None, cache_step: int = 64):
    """GPT-2 greedy decoding (`beams` 1), beam search, or sampling among the `top_k` most likely tokens;
    `compiled` False: the search's loop in Python; `cache_step`: the caches' size step (`engines.CACHE_STEP`)."""
    from kbert import build_transformer_model
    from kbert.generation import engines

    if not compiled:
        engines.CachedEngine.compiles_loops = False
    engines.CACHE_STEP = cache_step
    model = build_transformer_model(config_path, model="gpt2")
    prompts = _token_ids(_config(config_path)["vocab_size"], batch, length).tolist()
    strategy = {"strategy": "beam", "beam_size": beams} if beams > 1 else \
        {"strategy": "sample", "top_k": top_k, "seed": 0} if top_k else {}
    return lambda: engines.generate(model, prompts, max_new_tokens=NEW_TOKENS, end_id=-1, **strategy)


def _keras_hub_generator(config_path: str, precision: str, batch: int, length: int, beams: int = 1,
                         top_k: Optional[int] = None):
    import keras_hub
    import numpy as np

    config = _config(config_path)
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=config["vocab_size"], num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"], hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"], max_sequence_length=config["max_position_embeddings"])
    causal_lm = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    causal_lm.compile(sampler=keras_hub.samplers.BeamSampler(num_beams=beams) if beams > 1 else
                      keras_hub.samplers.TopKSampler(k=top_k, seed=0) if top_k else "greedy")
    # Without a preprocessor, generate fills the positions the padding mask leaves out.
    tokens = np.zeros((batch, length + NEW_TOKENS), "int32")
    tokens[:, :length] = _token_ids(config["vocab_size"], batch, length)
    inputs = {"token_ids": tokens, "padding_mask": tokens != 0}
    return lambda: causal_lm.generate(inputs, stop_token_ids=None)


BEAMS = 4
TOP_K = 40
GENERATING = ("generate", "beam", "sample")  # tasks whose speed is new tokens a second
NEW_TOKENS = 64
ENGINE_MAKERS = {"encode": {"kbert": _kbert_encoder, "kbert-einsum": _kbert_encoder_attending(()),
                            "kbert-fused": _kbert_encoder_attending(BACKENDS),
                            "kbert-cls": functools.partial(_kbert_encoder, first_token_only=True),
                            "keras-hub": _keras_hub_encoder, "transformers": _transformers_encoder},
                 "train": {"kbert": _kbert_train_step, "keras-hub": _keras_hub_train_step,
                           "kbert-fused": functools.partial(_kbert_train_step, attention_dropout=False),
                           "kbert-remat": functools.partial(_kbert_train_step, remat=True),
                           "transformers": _transformers_train_step},
                 "generate": {"kbert": _kbert_generator, "keras-hub": _keras_hub_generator,
                              "kbert-slots16": functools.partial(_kbert_generator, cache_step=16)},
                 "beam": {"kbert": functools.partial(_kbert_generator, beams=BEAMS),
                          "kbert-python": functools.partial(_kbert_generator, beams=BEAMS, compiled=False),
                          "keras-hub": functools.partial(_keras_hub_generator, beams=BEAMS)},
                 "sample": {"kbert": functools.partial(_kbert_generator, top_k=TOP_K),
                            "kbert-python": functools.partial(_kbert_generator, top_k=TOP_K, compiled=False),
                            "keras-hub": functools.partial(_keras_hub_generator, top_k=TOP_K)},
                 "finetune": {"kbert": _kbert_fine_tuning, "keras-hub": _keras_hub_fine_tuning}}


# --- the run: workers, alternating rounds, the table -------------------------------------------

def installed(engine: str) -> bool:
    library, backend = engine.split("/")
    module = {"keras-hub": "keras_hub", "transformers": "transformers"}.get(library)
    return all(importlib.util.find_spec(name) is not None for name in (backend, module) if name)


class Worker:
    """One engine's process; `time(calls)` asks it for the seconds of one call, averaged over `calls`."""

    def __init__(self, engine: str, task: str, precision: str, config_path: str, batch: int, length: int):
        self.name = f"{engine} {precision}"
        self.log = tempfile.TemporaryFile("w+")  # not a pipe: a chatty worker would fill it and stall
        # Several workers share one GPU: JAX must not claim most of its memory up front.
        env = {**os.environ, "KERAS_BACKEND": engine.split("/")[1], "TF_CPP_MIN_LOG_LEVEL": "3",
               "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.backends", "--worker", engine, "--task", task,
             "--precisions", precision, "--config", config_path, "--batches", str(batch), "--length", str(length)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def ready(self) -> bool:
        if self.process.stdout.readline().strip() != "ready":
            return self.failed("failed to start")
        return True

    def time(self, calls: int) -> Optional[float]:
        """Seconds per call, or None (reported) when the worker died, e.g. out of memory."""
        try:
            self.process.stdin.write(f"{calls}\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            return self.failed("stopped")
        answer = self.process.stdout.readline()
        return float(answer) if answer.strip() else self.failed("stopped")

    def memory(self) -> Optional[float]:
        """The worker's peak memory in MiB (its GPU's, where it runs on one), or None when it died."""
        try:
            self.process.stdin.write("memory\n")
            self.process.stdin.flush()
            return float(self.process.stdout.readline())
        except (BrokenPipeError, ValueError):
            return None

    def failed(self, what: str) -> None:
        self.log.seek(0)
        print(f"{self.name}: {what}:\n{self.log.read()[-2000:]}", file=sys.stderr)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.log.close()


def forward_flops_per_token(config: dict, length: int) -> float:
    """Matmul FLOPs of one token's forward pass through the encoder stack (embeddings and norms left out)."""
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    projections = 4 * hidden * hidden + 2 * hidden * config["intermediate_size"]  # q, k, v, o and the FFN
    attention = 2 * length * hidden  # scores and their weighted sum, against `length` keys
    return 2 * layers * (projections + attention)


def run(task: str, config_path: str, batch: int, length: int, rounds: int, calls: int, precisions: List[str],
        wanted: List[str], baseline: str, peak_tflops: Dict[str, float]) -> dict:
    wanted = [engine for engine in wanted if engine.split("/")[0] in ENGINE_MAKERS[task]]
    engines = [engine for engine in wanted if installed(engine)]
    workers = [Worker(engine, task, precision, config_path, batch, length) for precision in precisions
               for engine in engines]
    workers = [worker for worker in workers if worker.ready()]
    seconds: Dict[str, List[float]] = {worker.name: [] for worker in workers}
    try:
        for _ in range(rounds):
            for worker in list(workers):
                timed = worker.time(calls)
                if timed is None:
                    workers.remove(worker)
                    del seconds[worker.name]
                else:
                    seconds[worker.name].append(timed)
        peaks = {worker.name: worker.memory() for worker in workers}
    finally:
        for worker in workers:
            worker.close()
    # new tokens, reviews of a fine-tuning pass, or tokens read
    tokens = batch * NEW_TOKENS if task in GENERATING else REVIEWS if task == "finetune" else batch * length
    passes = {"encode": 1, "train": 3}.get(task)  # a backward pass costs two forward passes
    rows = {}
    for name, times in seconds.items():
        rows[name] = {"tokens_per_s": tokens / statistics.median(times), "seconds": times,
                      "peak_mib": peaks.get(name)}
        if passes:
            rate = rows[name]["tokens_per_s"] * passes * forward_flops_per_token(_config(config_path), length)
            rows[name]["tflops"] = rate / 1e12
            precision = name.split()[-1]
            if precision in peak_tflops:
                rows[name]["mfu"] = rows[name]["tflops"] / peak_tflops[precision]
        if baseline in seconds:
            rows[name]["vs_baseline"] = median_ratio(seconds[baseline], times)
    return {"task": task, "config": os.path.basename(config_path), "batch": batch, "length": length,
            "rounds": rounds, "calls_per_round": calls, "baseline": baseline, "peak_tflops": peak_tflops,
            "engines": rows, "not_installed": [engine for engine in wanted if engine not in engines]}


def print_table(results: dict) -> None:
    what = {"generate": f"{results['batch']} prompts of {results['length']} tokens, {NEW_TOKENS} new tokens each "
                        "(greedy)",
            "beam": f"{results['batch']} prompts of {results['length']} tokens, {NEW_TOKENS} new tokens each "
                    f"(beam search, {BEAMS} beams)",
            "sample": f"{results['batch']} prompts of {results['length']} tokens, {NEW_TOKENS} new tokens each "
                      f"(sampling among the {TOP_K} most likely)",
            "finetune": f"{REVIEWS} real reviews, batch {results['batch']}, maxlen {results['length']}"}.get(
        results["task"], f"{results['batch']} x {results['length']} tokens")
    step = {"train": "optimizer steps", "finetune": "fine-tuning epochs"}.get(results["task"], "calls")
    print(f"\n{results['config']}, {what}; {results['rounds']} alternating rounds of {results['calls_per_round']} "
          f"{step} each; medians")
    unit = {**dict.fromkeys(GENERATING, "new tokens/s"), "finetune": "reviews/s"}.get(results["task"], "tokens/s")
    print(f"{'engine':32} {unit:>12} {'TFLOP/s':>8} {'MFU':>6} {'peak MiB':>9}  vs {results['baseline']}")
    for name, row in results["engines"].items():
        ratio = describe(row["vs_baseline"]) if "vs_baseline" in row else "-"
        tflops = f"{row['tflops']:8.2f}" if "tflops" in row else f"{'-':>8}"
        mfu = f"{row['mfu']:6.1%}" if "mfu" in row else f"{'-':>6}"
        peak = f"{row['peak_mib']:9,.0f}" if row.get("peak_mib") is not None else f"{'-':>9}"
        print(f"{name:32} {row['tokens_per_s']:12,.1f} {tflops} {mfu} {peak}  {ratio}")
    if results["not_installed"]:
        print("not installed: " + ", ".join(results["not_installed"]))


CONFIGS = {"encode": ("bert_base_chinese", "bert_tiny"), "train": ("bert_base_chinese", "bert_tiny"),
           **dict.fromkeys(GENERATING, ("gpt2_chinese_base", "gpt2_chinese_base")),
           "finetune": ("bert_small_chinese", "bert_tiny")}


def peak(text: str) -> tuple:
    """`bf16=989.4` → ("bf16", 989.4)."""
    precision, _, tflops = text.partition("=")
    if precision not in ("fp32", "tf32", "bf16") or not tflops:
        raise argparse.ArgumentTypeError(f"expected PRECISION=TFLOPS such as bf16=989.4, got {text!r}")
    return precision, float(tflops)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=sorted(ENGINE_MAKERS), default="encode",
                        help="encode: BERT-base 8 x 128 forward passes; train: optimizer steps of a BERT-base "
                             "classifier, 8 x 128; generate (beam, sample): GPT-2-base greedy (beam search, 4 beams; "
                             "sampling among the 40 most likely), "
                             "32-token prompts, 64 new tokens, batch 1 and 8; finetune: an epoch of bert_small on 512 real reviews, "
                             "batch 32, maxlen 128")
    parser.add_argument("--quick", action="store_true", help="encode, train: bert_tiny, 2 x 16 tokens (a smoke test)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3, help="calls timed per engine per round")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "tf32", "bf16"],
                        help="tf32: float32 weights, TensorFloat-32 matmuls (a GPU's; the same as fp32 on a CPU)")
    parser.add_argument("--engines", nargs="+", default=ENGINES, choices=ENGINES + ATTENTION_ENGINES + SEARCH_ENGINES + VARIANT_ENGINES)
    parser.add_argument("--batches", type=int, nargs="+", help="batch sizes (encode, train: 8; generate: 1 and 8)")
    parser.add_argument("--length", type=int, help="tokens a row (encode, train: 128) or a prompt (generate: 32)")
    parser.add_argument("--baseline", default="kbert/tensorflow fp32",
                        help="the row the ratios are against (ENGINE PRECISION)")
    parser.add_argument("--peak-tflops", nargs="+", type=peak, default=[], metavar="PRECISION=TFLOPS",
                        help="the device's peak rate per precision, for the MFU column (e.g. an H100 SXM's dense "
                             "fp32=66.9 tf32=494.7 bf16=989.4)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return serve(args.worker, args.task, args.precisions[0], args.config, args.batches[0], args.length)
    from kbert.models.config import bundled_config_path

    config_path = bundled_config_path(CONFIGS[args.task][args.quick])
    quick = args.quick and args.task not in GENERATING
    batches = args.batches or ([2] if quick else {**dict.fromkeys(GENERATING, [1, 8]), "finetune": [32]}.get(
        args.task, [8]))
    length = args.length or (16 if quick else 32 if args.task in GENERATING else 128)
    results = []
    for batch in batches:
        results.append(run(args.task, config_path, batch, length, args.rounds, args.calls, args.precisions,
                           args.engines, args.baseline, dict(args.peak_tflops)))
        print_table(results[-1])
        if args.json:  # after each table, so a run cut short keeps what it measured
            with open(args.json, "w", encoding="utf-8") as handle:
                json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
