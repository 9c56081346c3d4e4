"""`kbert export`: a trained model for other runtimes: a TF SavedModel, ONNX (int8 too), LiteRT, or a `.keras` file.

What is exported is what `kbert predict` computes in the graph, so the
runtime needs no kbert:

- classify: `probabilities` `[batch, labels]` from `token_ids` and
  `segment_ids` (int32, `[batch, length]`);
- ner: the decoded tags `[batch, length]` (a CRF's Viterbi path included;
  the argmax of a softmax head), or a GlobalPointer's `[batch, types,
  length, length]` entity hits, from the same inputs; tag or type names
  are in the file's metadata (ONNX; `NAME.metadata.json` beside a LiteRT
  file, with the same keys) or `labels.json` beside it (SavedModel).
  Neither tf2onnx nor the LiteRT converter converts the Viterbi loop: a CRF
  tagger's ONNX or LiteRT file gives the `emissions`, with the transitions in
  its metadata to decode them.

ONNX goes through tf2onnx (so it needs TensorFlow) and is checked before it
is kept: onnxruntime runs it on real text and its outputs must match Keras's
(float32: 1e-4; int8: the same top label and probabilities within 0.1,
tags differing at no more than 5% of positions; NaN never). LiteRT (`.tflite`, TensorFlow
Lite's format) goes through TensorFlow's converter from the SavedModel, is
checked the same way in the LiteRT interpreter (`ai-edge-litert`, else
TensorFlow's own). `quantize="int8"` is onnxruntime's (or LiteRT's) dynamic
quantization: int8 weights, activations quantized on the fly, run by its int8
kernels.

A seq2seq model exports as ONNX only: its cached decoding step (and a T5's
encoder beside it), with `OnnxGenerator` to decode on it
(`kbert.serving.generator_export`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tempfile
from typing import Callable, Optional, Tuple

import keras
import numpy as np

from kbert.errors import KbertError, first_line, require_tensorflow
from kbert.io import atomic_path
from kbert.layers.rotary_attention import whole_query_blocks
from kbert.models import naming
from kbert.serving.conversion import (BF16_COSINE, EMBEDDING_SAMPLE_TEXTS, FLOAT_TOLERANCE, INT8_COSINE,
                                      INT8_PROBABILITY_TOLERANCE, INT8_TAG_SHARE, RERANK_LOGIT_SHARE, SAMPLE_TEXTS,
                                      ExportReport,
                                      convert_to_onnx, export_staging, publish, refuse_existing)

logger = logging.getLogger("kbert")

FORMATS = ("saved_model", "onnx", "litert", "keras")
VITERBI_NOTE = ("emissions [batch, length, tags]: decode each row with Viterbi over kbert_transitions "
                "[from tag, to tag], starting and ending at tag O (kbert.layers.crf.viterbi_decode does)")


#: What an exported file takes: token and segment ids, and for an embedding model whose pooling leaves a prompt
#: out, the tokens it pools (`POOLED`: 1 for each token counted, 0 for the prompt's).
INPUTS, POOLED = ("token_ids", "segment_ids"), "pooled"


@dataclasses.dataclass
class Endpoint:
    """The graph to export: a function of its `inputs` (token and segment ids, int32 `[batch, length]` each), its
    output's name, its labels, and for ONNX and LiteRT metadata beyond them (a CRF's transitions)."""

    model: keras.Model
    function: Callable
    output: str
    labels: list
    tokenizer: object
    task: str
    metadata: dict = dataclasses.field(default_factory=dict)
    samples: Optional[list] = None  # the check's rows (a feature each) where a tokenizer's do not do
    inputs: Tuple[str, ...] = INPUTS
    encode: Optional[Callable[[list], list]] = None  # texts to rows of the inputs (static int8's calibration)

    def serving_function(self) -> Callable:
        """`{output: the function's value}` of the inputs by name, as a SavedModel or ONNX file answers."""
        def serve(token_ids, segment_ids, pooled=None):
            features = (token_ids, segment_ids) + (() if pooled is None else (pooled,))
            return {self.output: self.function(*features)}

        return serve


SUFFIXES = {".onnx": "onnx", ".tflite": "litert", ".keras": "keras"}


def format_of(out: str, format: Optional[str]) -> str:
    """The format asked for, else the one `out` names (`.onnx`, `.tflite`, `.keras`; else a SavedModel directory).

    A format and a path that disagree (`--format onnx x.tflite`) are refused: the file's name would lie.
    """
    named = SUFFIXES.get(os.path.splitext(out)[1], "saved_model")
    if format is None:
        return named
    if format not in FORMATS:
        raise KbertError(f"--format {format}: expected one of {', '.join(FORMATS)}")
    if format != named:
        wanted = {suffix_format: suffix for suffix, suffix_format in SUFFIXES.items()}.get(format)
        raise KbertError(f"{out}: --format {format} writes " + (f"a {wanted} file: name it NAME{wanted}"
                         if wanted else "a SavedModel directory: give a path without .onnx, .tflite or .keras")
                         + f" (or leave out --format: the path's ending picks {named})")
    return format


def export_model(model_dir: str, out: str, format: Optional[str] = None, quantize: Optional[str] = None,
                 head: Optional[str] = None, adapter: Optional[str] = None) -> ExportReport:
    """Exports a model directory of `kbert train` (see the module's docstring); nothing is replaced.

    Args:
        model_dir: the model directory.
        out: the path to write (it must not exist): a SavedModel directory, a `.onnx`, `.tflite` or `.keras`
            file.
        format: `saved_model`, `onnx`, `litert` or `keras` (default: from `out`).
        quantize: `int8` (ONNX and LiteRT).
        head: an embedding folder's bge-m3 head (`sparse`, `colbert`; `Embedder.load(head=)`), None: its own.
        adapter: an embedding folder's task LoRA adapter (jina-embeddings-v3's), merged into the weights the
            file computes; None: the base weights.
    """
    format = format_of(out, format)
    if os.path.lexists(out):
        raise KbertError(f"{out}: already exists; choose a new path (an export never replaces a file)")
    if quantize not in (None, "int8"):
        raise KbertError(f"--quantize {quantize}: expected int8")
    if quantize and format not in ("onnx", "litert"):
        raise KbertError("--quantize int8 is onnxruntime's or LiteRT's dynamic quantization: export with --format "
                         "onnx or litert (a path ending in .onnx or .tflite)")
    if format != "keras":
        require_tensorflow_backend(f"--format {format}")
    if _is_embedding_model(model_dir):  # a sentence-transformers folder: its pooling and normalisation in the graph
        from kbert.embeddings.embedder import Embedder

        # float32 on every machine: the file's weights are what it is checked against and what int8 starts from
        embedder = Embedder.load(model_dir, adapter=adapter, head=head, dtype="float32")
        return _write(embedder_endpoint(embedder), out, format,
                      quantize)
    for option, value in (("head", head not in (None, "dense") and head), ("adapter", adapter)):
        if value:
            raise KbertError(f"--{option} {value}: an embedding folder's option (bge-m3's heads, jina-embeddings-v3's "
                             f"task adapters); {model_dir} is a {_task(model_dir)} model")
    task = _task(model_dir)
    if task == "seq2seq":
        if format != "onnx":
            raise KbertError(f"{model_dir}: a seq2seq model exports as ONNX (its cached decoding step: --format onnx "
                             "or a path ending in .onnx); a SavedModel or LiteRT file of it is not made yet")
        from kbert.serving.generator_export import write_generator_onnx  # it builds on this module

        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        return write_generator_onnx(model_dir, out, quantize)
    endpoint = _endpoint(model_dir, task, crf_emissions=format in ("onnx", "litert"))
    endpoint.metadata.update(_input_metadata(model_dir))
    return _write(endpoint, out, format, quantize)


def _write(endpoint: Endpoint, out: str, format: str, quantize: Optional[str]) -> ExportReport:
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    if format == "keras":
        with atomic_path(out) as temporary:  # the temporary name ends in .keras too
            endpoint.model.save(temporary)
        return ExportReport(out, format)
    if format == "saved_model":
        _write_saved_model(endpoint, out)
        return ExportReport(out, format)
    if format == "litert":
        return _write_litert(endpoint, out, quantize)
    return write_onnx(endpoint, out, quantize)


def require_tensorflow_backend(option: str, instead: str = ", or --format keras") -> None:
    """SavedModel, ONNX (through tf2onnx) and LiteRT files are traced from a TensorFlow graph: Keras must run on
    TensorFlow. Said first, rather than as a converter's failure to read a JAX or PyTorch model."""
    if keras.backend.backend() != "tensorflow":
        raise KbertError(f"{option} traces the model as a TensorFlow graph, and Keras runs on "
                         f"{keras.backend.backend()} here: run it with KERAS_BACKEND=tensorflow (the model "
                         f"directory is the same on every backend){instead}")


def _is_embedding_model(model_dir: str) -> bool:
    from kbert.tasks.predictors import is_embedding_model, resolved

    return is_embedding_model(resolved(model_dir))


def _task(model_dir: str) -> str:
    from kbert.training.model_dir import read_training_state

    return read_training_state(model_dir)["task"]


def _endpoint(model_dir: str, task: str, crf_emissions: bool) -> Endpoint:
    if task == "classify":
        from kbert.tasks.classification import load_classifier

        return classifier_endpoint(load_classifier(model_dir))
    if task == "ner":
        from kbert.tasks.ner import load_tagger

        tagger = load_tagger(model_dir)
        names, tokenizer = tagger.labels.names, tagger.encoder.tokenizer
        if tagger.head == "crf" and crf_emissions:
            # tf2onnx and LiteRT's converter cannot convert the Viterbi loop: the emissions, and the transitions.
            model = tagger.model
            transitions = keras.ops.convert_to_numpy(model.get_layer(naming.CRF).trans).tolist()
            return Endpoint(model, _forward(model), "emissions", names, tokenizer, task,
                            {"kbert_transitions": transitions, "kbert_decoding": VITERBI_NOTE})
        output = "entity_hits" if tagger.head == "global_pointer" else "tags"
        return Endpoint(tagger.model, tagger.decode, output, names, tokenizer, task)
    raise KbertError(f"{model_dir}: a {task} model; kbert export takes classifiers, taggers, seq2seq models and "
                     "embedding models (sentence-transformers folders)")


def _input_metadata(model_dir: str) -> dict:
    """How `kbert predict` makes the model's input, for a runtime without kbert: the cut, the lower-casing, and
    the longest input the position table takes (longer fails inside the runtime)."""
    from kbert.models.config import BertConfig
    from kbert.training.model_dir import CONFIG_FILE, read_training_state

    options = read_training_state(model_dir)["options"]
    config = BertConfig.from_json_file(os.path.join(model_dir, CONFIG_FILE))
    return {"kbert_maxlen": options["maxlen"], "kbert_do_lower_case": options["do_lower_case"],
            "kbert_max_positions": config.max_position_embeddings,
            "kbert_input_note": "token_ids and segment_ids as kbert's WordPiece tokenizer makes them from the "
                                "text (lower-cased where kbert_do_lower_case), [CLS] ... [SEP], cut to kbert_maxlen "
                                "tokens; never longer than kbert_max_positions"}


def embedder_endpoint(embedder) -> Endpoint:
    """An embedding model's vectors (pooled, projected and normalised as the model declares, in the graph), with
    what a runtime without kbert needs to make its input and read its output. A multi-vector encoder's are each
    token's (`[batch, tokens, dimensions]`), checked on queries filled up to their expansion as well."""
    note = ("token_ids and segment_ids as the model's own tokenizer (tokenizer.json or vocab.txt in its folder) "
            "makes them, cut to kbert_maxlen tokens")
    inputs, samples = INPUTS, None
    if not embedder.include_prompt:  # its pooling leaves a prompt out: which tokens to pool is a third input
        inputs = INPUTS + (POOLED,)
        note += ("; pooled: 1 for each token the pooling counts, 0 for the prompt's leading tokens (the prompt "
                 "tokenized alone, less a special token at its end: kbert_prompt_tokens for each of the model's "
                 "prompts) and for padding")
        samples = _prompted_samples(embedder)
    note += embedder.output.export_note()
    samples = embedder.output.export_samples(embedder, list(SAMPLE_TEXTS + EMBEDDING_SAMPLE_TEXTS)) or samples
    return Endpoint(embedder.model, _forward(embedder.model), "embeddings", [], embedder.tokenizer, "embed",
                    {"kbert_pooling": str(embedder.output), "kbert_normalized": embedder.normalize,
                     "kbert_dimensions": embedder.dimensions, "kbert_maxlen": embedder.maxlen,
                     "kbert_input_note": note, **_prompt_metadata(embedder)}, samples, inputs,
                    embedder.prompted_rows)


def _prompted_samples(embedder) -> list:
    """The check's rows for a model whose pooling leaves a prompt out: the sample texts after each of its prompts
    (and none), each with the tokens its pooling counts."""
    texts = list(SAMPLE_TEXTS + EMBEDDING_SAMPLE_TEXTS)
    return [row for prompt in ("", *embedder.prompts.values()) for row in embedder.prompted_rows(texts, prompt)]


def _prompt_metadata(embedder) -> dict:
    """A model's prompts by name, and where its pooling leaves them out, each one's leading tokens it skips."""
    if embedder.include_prompt:
        return {}
    return {"kbert_prompts": dict(embedder.prompts),
            "kbert_prompt_tokens": {name: embedder.prompt_tokens(text) for name, text in embedder.prompts.items()}}


def classifier_endpoint(classifier) -> Endpoint:
    """A loaded classifier's probabilities, with its labels and tokenizer."""
    model = classifier.model
    return Endpoint(model, _forward(model), "probabilities", classifier.labels.names, classifier.tokenizer,
                    "classify", encode=lambda texts: classifier.tokenizer.encode_all(texts, maxlen=classifier.maxlen))


def reranker_endpoint(reranker) -> Endpoint:
    """A cross-encoder's relevance logit of `[CLS] query [SEP] passage [SEP]`, checked on pairs of the sample texts;
    its calibration texts are `query<TAB>passage` lines."""
    texts = list(SAMPLE_TEXTS + EMBEDDING_SAMPLE_TEXTS)
    queries, passages = zip(*[(query, passage) for query in texts for passage in texts])

    def encode(lines: list) -> list:
        pairs = [line.split("\t", 1) for line in lines]
        alone = [number for number, pair in enumerate(pairs, 1) if len(pair) < 2]
        if alone:
            raise KbertError(f"calibration text {alone[0]} has no tab: a reranker is calibrated on query<TAB>passage "
                             "lines")
        return reranker.tokenizer.encode_all([q for q, _ in pairs], [p for _, p in pairs], maxlen=reranker.maxlen)

    return Endpoint(reranker.model, _forward(reranker.model), "logits", [], reranker.tokenizer, "rerank",
                    {"kbert_maxlen": reranker.maxlen, "kbert_activation": reranker.activation},
                    reranker.tokenizer.encode_all(list(queries), list(passages), maxlen=reranker.maxlen),
                    encode=encode)


def _forward(model) -> Callable:
    """The model's outputs as a function of its inputs (token and segment ids, ...), in inference mode, its
    attention over whole rows in one piece (a loop of query blocks would keep the runtime from fusing it)."""
    whole_query_blocks(model)
    return lambda *features: model(list(features), training=False)


def _signature(tf, inputs: Tuple[str, ...] = INPUTS):
    return [tf.TensorSpec([None, None], tf.int32, name=name) for name in inputs]


def _write_saved_model(endpoint: Endpoint, out: str) -> None:
    require_tensorflow("a SavedModel export", "--format onnx or keras")
    with export_staging() as staging:  # written away from the output, then moved in beside it and renamed
        _saved_model(endpoint, os.path.join(staging, "model"))
        beside = tempfile.mkdtemp(dir=os.path.dirname(os.path.abspath(out)), prefix=".tmp-export-")
        try:
            shutil.copytree(os.path.join(staging, "model"), os.path.join(beside, "model"))
            os.replace(os.path.join(beside, "model"), out)
        finally:
            shutil.rmtree(beside, ignore_errors=True)


def _saved_model(endpoint: Endpoint, path: str) -> None:
    """The endpoint as a SavedModel at `path`, its names in `labels.json` inside."""
    import tensorflow as tf

    archive = keras.export.ExportArchive()
    archive.track(endpoint.model)
    archive.add_endpoint("serving_default", endpoint.serving_function(),
                         input_signature=_signature(tf, endpoint.inputs))
    archive.write_out(path, verbose=False)
    with open(os.path.join(path, "labels.json"), "w", encoding="utf-8") as handle:
        json.dump(endpoint.labels, handle, ensure_ascii=False)


def export_metadata(endpoint: Endpoint) -> dict:
    """What an ONNX or LiteRT file's reader needs beside its output: the task, the output's name, the label or
    tag names, what a batch is padded with (`kbert_pad_id`: the model hides exactly it) and, for a CRF's
    emissions, the transitions and how to decode with them."""
    return {"kbert_task": endpoint.task, "kbert_output": endpoint.output, "kbert_labels": endpoint.labels,
            "kbert_pad_id": endpoint.tokenizer.pad_id, "kbert_padding_note": PADDING_NOTE, **endpoint.metadata}


PADDING_NOTE = ("a batch's shorter rows are padded to its longest with kbert_pad_id in token_ids (0 in "
                "segment_ids): the model hides those positions, and no other; a negative kbert_pad_id (-1 - the pad "
                "token: a tokenizer.json's) hides the positions after a text whatever token it holds")


def metadata_path(litert_file: str) -> str:
    """Where a LiteRT export's metadata (`_metadata`'s keys) goes: `NAME.metadata.json` beside `NAME.tflite`."""
    return os.path.splitext(litert_file)[0] + ".metadata.json"


def _write_litert(endpoint: Endpoint, out: str, quantize: Optional[str]) -> ExportReport:
    tf = require_tensorflow("a LiteRT export (through TensorFlow's converter)", "--format onnx or keras")
    refuse_existing(out, metadata_path(out))
    with export_staging() as staging:
        _saved_model(endpoint, os.path.join(staging, "saved_model"))
        converter = tf.lite.TFLiteConverter.from_saved_model(os.path.join(staging, "saved_model"))
        if quantize:  # dynamic-range quantization: int8 weights, int8 kernels where LiteRT has them
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        try:
            flatbuffer = converter.convert()
        except Exception as error:  # the converter's own errors: an op LiteRT's built-in kernels lack
            raise KbertError(f"TensorFlow's LiteRT converter cannot convert this {endpoint.task} model's graph "
                             f"({first_line(error)}); export it as a SavedModel or ONNX instead") from None
        path, metadata = os.path.join(staging, "model.tflite"), os.path.join(staging, "metadata.json")
        with open(path, "wb") as handle:
            handle.write(flatbuffer)
        with open(metadata, "w", encoding="utf-8") as handle:
            json.dump(export_metadata(endpoint), handle, ensure_ascii=False, indent=1)
        difference = check_export(endpoint, litert_runner(path, endpoint.inputs), "LiteRT", quantize)
        publish({metadata: metadata_path(out), path: out})
    return ExportReport(out, "litert", quantize, difference, runtime="the LiteRT interpreter")


def litert_runner(path: str, inputs: Tuple[str, ...] = INPUTS) -> Callable:
    """A function of the file's `inputs` (token and segment ids, ...: int32 arrays, in that order) running the
    LiteRT file's signature on every core (ai-edge-litert's interpreter where installed, else TensorFlow's)."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        import tensorflow as tf

        Interpreter = tf.lite.Interpreter
    # every core, as onnxruntime takes them (the interpreter's default is one thread)
    signature = Interpreter(model_path=path, num_threads=os.cpu_count()).get_signature_runner("serving_default")
    return lambda *features: next(iter(signature(**dict(zip(inputs, features))).values()))


def write_onnx(endpoint: Endpoint, out: str, quantize: Optional[str]) -> ExportReport:
    tf = require_tensorflow("ONNX export (through tf2onnx)", "--format keras")
    signature = _signature(tf, endpoint.inputs)
    function = tf.function(endpoint.serving_function(), input_signature=signature)
    with export_staging() as staging:
        # An embedding's every value counts (not only the top label): its weights get a scale per channel.
        path = convert_to_onnx(function, signature, export_metadata(endpoint), staging, quantize, endpoint.task,
                               per_channel=endpoint.output == "embeddings")
        difference = check_export(endpoint, onnx_runner(path), "ONNX", quantize)
        publish({path: out})
    return ExportReport(out, "onnx", quantize, difference)


def onnx_runner(path: str, threads: Optional[int] = None) -> Callable:
    """A function of the file's inputs (token and segment ids, ...: int32 arrays, in the file's order) running it
    in onnxruntime on the CPU, on `threads` threads a call (None: onnxruntime's default, every core)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads or 0  # 0: onnxruntime's default
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = [value.name for value in session.get_inputs()]
    return lambda *features: session.run(None, dict(zip(names, features)))[0]


def check_export(endpoint: Endpoint, run: Callable, what: str, quantize: Optional[str],
                  rows: Optional[list] = None) -> float:
    """The largest difference between an exported file's outputs (`run`) and Keras's on real text (for decoded
    tags, the share of positions that differ). Refused: any NaN or infinity; float32 beyond 1e-4 or tags that
    differ at all; int8 and bfloat16 (`quantize`, OpenVINO's precision) beyond `INT8_PROBABILITY_TOLERANCE` or
    another top label, or tags (a CRF's best tag per position) differing at more than `INT8_TAG_SHARE` of
    positions; vectors below a cosine of `INT8_COSINE` with Keras's (bfloat16: `BF16_COSINE`). `rows`: the
    texts to check on, as the model takes them (default: `SAMPLE_TEXTS`, and for an embedding model
    `EMBEDDING_SAMPLE_TEXTS`)."""
    from kbert.tokenizers import pad_batch

    texts = SAMPLE_TEXTS + (EMBEDDING_SAMPLE_TEXTS if endpoint.output == "embeddings" else ())
    rows = rows or endpoint.samples or [endpoint.tokenizer.encode(text) for text in texts]
    features = pad_batch(rows, endpoint.tokenizer.pad_id)
    expected = np.asarray(keras.ops.convert_to_numpy(endpoint.function(*features)))
    got = np.asarray(run(*features))
    refused = f"the {what} file's {endpoint.output}" + (f" ({quantize})" if quantize else "")
    if got.dtype.kind in "fc" and not np.isfinite(got).all():
        raise KbertError(f"{refused} hold NaN or infinite values on sample text; nothing was written")
    if expected.dtype.kind in "fc":
        difference = float(np.abs(got.astype(np.float64) - expected).max())
    else:  # tags or hits: the share of positions that differ
        difference = float(np.mean(got != expected))
    if not quantize:
        allowed = FLOAT_TOLERANCE if expected.dtype.kind in "fc" else 0
        if not difference <= allowed:
            raise KbertError(f"{refused} differ from Keras's by {difference:.2e} on sample text (allowed: "
                             f"{allowed}); nothing was written")
        return difference
    if endpoint.output == "embeddings":
        if got.shape[-1] == 1:  # bge-m3's token weights: a row's weights are its vector
            got, expected = got[..., 0], expected[..., 0]
        cosines = np.sum(got * expected, -1) / np.maximum(
            np.linalg.norm(got, axis=-1) * np.linalg.norm(expected, axis=-1), 1e-12)
        least = BF16_COSINE if quantize == "bfloat16" else INT8_COSINE
        if not cosines.min() >= least:
            raise KbertError(f"{refused} have a cosine of {cosines.min():.4f} with Keras's float32 vectors on sample "
                             f"text (allowed: at least {least}); nothing was written. Serve or export this "
                             "model in float32")
        return difference
    if endpoint.output == "logits":  # a reranker's: each logit close, on the scale the pairs are ranked on
        allowed = RERANK_LOGIT_SHARE * max(float(np.ptp(expected)), 1.0)
        if not difference <= allowed:
            raise KbertError(f"{refused} differ from Keras's float32 by {difference:.3f} on sample pairs (allowed: "
                             f"{allowed:.3f}, {RERANK_LOGIT_SHARE:g} of their logits' spread); nothing was written. Serve this "
                             "model in float32")
        return difference
    if endpoint.output == "probabilities":
        if (got.argmax(-1) != expected.argmax(-1)).any() or not difference <= INT8_PROBABILITY_TOLERANCE:
            raise KbertError(f"{refused} differ from Keras's float32 by {difference:.2e} on sample text, top labels "
                             f"{got.argmax(-1).tolist()} against {expected.argmax(-1).tolist()} (allowed: the "
                             f"same labels, {INT8_PROBABILITY_TOLERANCE} apart); nothing was written. Serve or "
                             "export this model in float32")
        return difference
    changed = float(np.mean(got.argmax(-1) != expected.argmax(-1))) if expected.dtype.kind in "fc" else difference
    if not changed <= INT8_TAG_SHARE:
        raise KbertError(f"{refused} give other tags than Keras's float32 at {changed:.1%} of positions on sample "
                         f"text (allowed: {INT8_TAG_SHARE:.0%}); nothing was written. Export in float32")
    return difference
