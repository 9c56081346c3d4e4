"""Any model directory, loaded once, answering texts: what `kbert predict` and `kbert serve` share.

`load_predictor(model_dir)` reads the directory's task from its
training.json and gives a `Predictor`: called on a list of texts it returns
one JSON-ready row per text, the row `kbert predict --json` prints:

- classify: `{"text", "label", "probability", "probabilities"}` (every label's, by name)
- ner: `{"text", "entities": [{"type", "start", "end", "text"}, ...]}`
- seq2seq: `{"text", "target"}`
- mlm (a `kbert pretrain` directory): `{"text", "masks": [{"candidates": [...]}], "filled"}`,
  the tokens most probable at each `[MASK]` of the text.
- embed (a sentence-transformers folder, or a name of one): `{"text", "embedding": [...]}`.
- rerank (a `kbert train --task rerank` directory or a CrossEncoder folder): `{"text", "text_pair",
  "score", "logit"}` for each (query, passage) pair.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, List, Optional, Sequence


from kbert.errors import KbertError


PAIR_TASKS = ("classify", "rerank")  # the tasks whose rows may read a second text


@dataclasses.dataclass
class PredictionSettings:
    """How a predictor runs: `batch_size` texts a batch, `bucketing` by length; for seq2seq
    `beam_size` and `max_new_tokens`; for fill-mask `top_k` candidates a mark; for an embedding model with task
    LoRA adapters (jina-embeddings-v3) the `adapter` merged in; for an embedding model, the calibration `ranges`
    file its int8 and uint8 vectors take (`kbert.embeddings.precision`), and of bge-m3 the `head` whose
    vectors it gives (`dense`, `sparse`, `colbert`); the weights' `dtype` (`auto`: for this machine,
    `kbert.training.precision.choose_dtype`)."""

    batch_size: int = 64
    bucketing: bool = True
    beam_size: int = 1
    max_new_tokens: Optional[int] = None
    top_k: int = 5
    adapter: Optional[str] = None
    ranges: Optional[str] = None
    head: Optional[str] = None
    dtype: str = "auto"


@dataclasses.dataclass
class Predictor:
    """A loaded model directory: `predictor(texts)` gives a row per text (see the module's docstring).

    Args:
        task: the directory's task (`classify`, `ner`, `seq2seq`, `mlm`, `embed`).
        model_dir: where it was loaded from.
        rows: the function from texts (and, for classify, text pairs) to rows.
        tokenizer: the model's tokenizer (a server counts tokens with it).
        maxlen: the longest input the model takes, in tokens.
        embedder: an embedding model's `kbert.embeddings.embedder.Embedder` (its server's own routes use it).
        reranker: a reranker's `kbert.tasks.reranking.Reranker` (likewise).
        dtype: the weights' dtype and why (`kbert.training.precision.DtypeChoice`; a server shows it).

    Example (a classifier `kbert train` wrote):
    >>> predictor = load_predictor("runs/sentiment")  # doctest: +SKIP
    >>> predictor(["这家酒店很好"])  # doctest: +SKIP
    [{'text': '这家酒店很好', 'label': '1', 'probability': 0.97}]
    """

    task: str
    model_dir: str
    rows: Callable[..., List[dict]]
    tokenizer: Any = None
    maxlen: Optional[int] = None
    embedder: Any = None
    reranker: Any = None
    dtype: Any = None

    def __call__(self, texts: Sequence[str], text_pairs: Optional[Sequence[Optional[str]]] = None) -> List[dict]:
        if not len(texts):
            raise KbertError("no texts to predict")
        self.check_pairs(text_pairs)
        return self.rows(list(texts), text_pairs) if self.task in PAIR_TASKS else self.rows(list(texts))

    def check_pairs(self, text_pairs: Optional[Sequence[Optional[str]]]) -> None:
        """Raises `KbertError` where the model does not take these text pairs (or needs them)."""
        if text_pairs is not None and self.task not in PAIR_TASKS:
            raise KbertError(f"text pairs are for classifiers and rerankers; {self.model_dir} is a {self.task} model")
        if self.task == "rerank" and (text_pairs is None or any(pair is None for pair in text_pairs)):
            raise KbertError(f"{self.model_dir} is a reranker: give each query its passage (query<TAB>passage)")

    def blank(self, text: str) -> dict:
        """The row of a blank text (which is not predicted), so that outputs line up with inputs."""
        if self.embedder is not None:
            return self.embedder.output.blank_row(text)
        return {"classify": {"text": text, "label": None, "probability": None, "probabilities": None},
                "ner": {"text": text, "entities": []},
                "seq2seq": {"text": text, "target": None},
                "mlm": {"text": text, "masks": [], "filled": None},
                "rerank": {"text": text, "text_pair": None, "score": None, "logit": None}}[self.task]


def classifier_predictor(classifier, model_dir: str, settings: PredictionSettings) -> Predictor:
    """The predictor of a loaded classifier (`kbert serve --quantize int8` gives one whose model is an
    int8 ONNX file's)."""
    return Predictor("classify", model_dir, lambda texts, pairs=None: classifier.labelled(
        texts, pairs, settings.batch_size, settings.bucketing), classifier.tokenizer, classifier.maxlen)


def check_settings(settings: PredictionSettings, task: str, model_dir: str) -> None:
    """A `KbertError` where `settings` give an embedding model's option (`adapter`, `ranges`, `head`) to a `task`
    model."""
    for name in ("adapter", "ranges", "head"):
        if getattr(settings, name) is not None and task != "embed":
            raise KbertError(f"{model_dir}: {name} {getattr(settings, name)!r} (--{name}) is an embedding model's "
                             f"option; this is a {task} model")


def load_predictor(model_dir: "str | os.PathLike[str]", settings: Optional[PredictionSettings] = None) -> Predictor:
    """The model directory `kbert train` or `kbert pretrain` wrote, or an embedding model (a
    sentence-transformers folder or a name of one), loaded for prediction in `settings.dtype` (the choice in
    the predictor's `dtype`); a `kbert.io.ModelFolder` keeps the files its caller read."""
    from kbert.io import ModelFolder
    from kbert.training.precision import model_dtype

    settings = settings or PredictionSettings()
    # what it holds and its model read from one reading of its files (the caller's, where it read some already)
    folder = model_dir if isinstance(model_dir, ModelFolder) else ModelFolder(resolved(model_dir))
    task = model_task(folder)
    check_settings(settings, task, folder.path)
    with model_dtype(settings.dtype) as choice:
        predictor = _task_predictor(folder, task, settings)
    predictor.dtype = choice
    return predictor


def _task_predictor(folder, task: str, settings: PredictionSettings) -> Predictor:
    """`load_predictor`'s predictor of a `task` model, built in the dtype policy its caller set."""
    from kbert.training.model_dir import load_model

    model_dir = folder.path
    if task == "embed":
        return embedding_predictor(folder, settings)
    if task == "rerank":
        return reranker_predictor(folder, settings)
    if task == "classify":
        from kbert.tasks.classification import load_classifier

        return classifier_predictor(load_classifier(folder), model_dir, settings)
    if task == "ner":
        from kbert.tasks.ner import find_entities, load_tagger

        tagger = load_tagger(folder)
        return Predictor(task, model_dir, lambda texts: [
            {"text": text, "entities": entities}
            for text, entities in zip(texts, find_entities(tagger, texts, settings.batch_size, settings.bucketing))],
            tagger.encoder.tokenizer, tagger.encoder.maxlen)
    if task == "seq2seq":
        from kbert.tasks.seq2seq import generate_targets, load_generator

        loaded = load_generator(folder)
        return Predictor(task, model_dir, lambda texts: [
            {"text": text, "target": target} for text, target in zip(texts, generate_targets(
                loaded, texts, settings.beam_size, settings.max_new_tokens, settings.batch_size))],
            loaded.tokenizer, loaded.options.maxlen)
    from kbert.tasks.pretraining import MaskedLanguageModelTask, fill_masks

    loaded = load_model(folder, MaskedLanguageModelTask)
    return Predictor(task, model_dir, lambda texts: fill_masks(loaded, texts, settings.top_k, settings.batch_size),
                     loaded.tokenizer, loaded.options.maxlen)


MODEL_KINDS = ("a model directory of kbert train or kbert pretrain, a sentence-transformers folder (modules.json), "
               "a CrossEncoder folder, or a name such as hf://OWNER/NAME")


def model_task(folder: str) -> str:
    """The task of a model's folder (`resolved` already): an embedding model's, a reranker's, or the one its
    training state records. A path that is no folder, or a folder that is none of these, is refused naming
    what a model may be."""
    from kbert.tasks.reranking import cross_encoder_config
    from kbert.training.model_dir import CONFIG_FILE, TRAINING_FILE, read_training_state

    if not os.path.isdir(folder):
        raise KbertError(f"{folder}: {'not a directory' if os.path.exists(folder) else 'no such directory'}; "
                         f"expected {MODEL_KINDS}")
    if is_embedding_model(folder):
        return "embed"
    if is_cross_encoder(folder):
        return "rerank"
    if not os.path.exists(os.path.join(folder, TRAINING_FILE)) and _names_a_classifier(folder):
        cross_encoder_config(folder)  # not a one-label one: its error says why it is not served
    if not any(os.path.exists(os.path.join(folder, name)) for name in (CONFIG_FILE, TRAINING_FILE)):
        raise KbertError(f"{folder}: holds no model (no {TRAINING_FILE}, {CONFIG_FILE} or modules.json); expected "
                         f"{MODEL_KINDS}")
    return read_training_state(folder)["task"]


def _names_a_classifier(folder: str) -> bool:
    """Whether a folder is a CrossEncoder's by its own word (sentence-transformers' settings), or holds a Hugging
    Face config without kbert's training state."""
    from kbert.embeddings.folders import model_type

    return model_type(folder) == "CrossEncoder" or os.path.isfile(os.path.join(folder, "config.json"))


def resolved(model: str) -> str:
    """A model's folder: a checkpoint name (`hf://...`, an archive's URL) fetched once into the cache."""
    from kbert.hub.sources import is_checkpoint_name, resolve_checkpoint

    return resolve_checkpoint(model) if is_checkpoint_name(model) else model


def is_embedding_model(model: str) -> bool:
    """Whether a folder holds an embedding model: a sentence-transformers folder (a `kbert train --task embed`
    directory is one too)."""
    from kbert.embeddings.folders import is_sentence_transformer

    return os.path.isdir(model) and is_sentence_transformer(model)


def is_cross_encoder(model: str) -> bool:
    """Whether a folder holds a reranker: a one-label sequence classifier (a `kbert train --task rerank`
    directory is one too)."""
    from kbert.tasks.reranking import is_reranker

    return os.path.isdir(model) and is_reranker(model)


def reranker_predictor(model: "str | os.PathLike[str]", settings: PredictionSettings, reranker=None) -> Predictor:
    """A reranker's predictor: each (query, passage) pair's `{"text", "text_pair", "score", "logit"}`
    (`reranker`: `model` loaded already, e.g. with its OpenVINO model in place)."""
    from kbert.tasks.reranking import Reranker

    reranker = reranker or Reranker.load(model)
    return Predictor("rerank", os.fspath(model), lambda queries, passages: rerank_rows(
        reranker, queries, passages, reranker.logits(queries, passages, settings.batch_size)), reranker.tokenizer,
        reranker.maxlen, reranker=reranker)


def rerank_rows(reranker, queries: Sequence[str], passages: Sequence[str], logits: Sequence[float]) -> List[dict]:
    """A reranker's rows: `{"text", "text_pair", "score", "logit"}` of each (query, passage) pair, the score
    its logit through the model's activation (`Reranker.scores`)."""
    return [{"text": query, "text_pair": passage, "score": float(score), "logit": float(logit)}
            for query, passage, logit, score in zip(queries, passages, logits, reranker.scores(logits))]


def embedding_predictor(model: "str | os.PathLike[str]", settings: PredictionSettings, embedder=None) -> Predictor:
    """An embedding model's predictor: a `{"text", "embedding"}` row per text (a sparse encoder's:
    `{"text", "indices", "values"}`; a multi-vector encoder's: `{"text", "embeddings"}`, a vector per scored token,
    the texts embedded as documents; `embedder`: `model` loaded already, e.g. with its int8 model in place)."""
    from kbert.embeddings.embedder import Embedder
    from kbert.embeddings.precision import load_ranges

    embedder = embedder or Embedder.load(model, adapter=settings.adapter, head=settings.head)
    if settings.ranges is not None:
        if not embedder.output.calibrated:
            raise KbertError(f"{model}: a {embedder.output.name} encoder's vectors are not "
                             f"quantized by calibration ranges ({settings.ranges}); serve it without --ranges")
        embedder.ranges = load_ranges(settings.ranges, embedder.dimensions)
    return Predictor("embed", os.fspath(model), lambda texts: embedder.output.predict_rows(
        embedder, texts, settings.batch_size, settings.bucketing), embedder.tokenizer, embedder.maxlen, embedder)
