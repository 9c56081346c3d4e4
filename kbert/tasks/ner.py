"""Named-entity recognition: a tagger on any backbone, trained, evaluated and used from tagged files.

Units and pieces. The tokens of a tagged file (see `kbert.tasks.labelling`)
are its *units*: characters in Chinese files such as MSRA's, words in CoNLL
files. Each unit is cut into WordPiece tokens on its own, so a Chinese
character is always one token, and "1997" written as four characters stays
four tokens; training and prediction cut text the same way. A raw text is cut
into the units its model was trained on: every non-blank character, or every
run of non-blank characters. Entities are spans of units; on the pieces they
cover every piece of their units (`[CLS]` and `[SEP]` are tagged `O`), and a
predicted entity is read back on the units, so its offsets are characters of
the input. A sentence longer than `maxlen` is cut, between units, into parts
that fit.

Heads (`--head`):
- `crf`: emissions and a CRF (loss: its negative log-likelihood), decoded by
  Viterbi inside TensorFlow, with paths that start and end on `O`;
- `softmax`: a tag per piece, decoded by argmax;
- `global_pointer`: a score per entity type and (start, end) pair, trained
  with the multilabel cross-entropy; spans scoring above 0 are entities.

The tag heads use the data's scheme (BIO, BIOES or BMES). The model directory
remembers the task, head, scheme and units in training.json.
"""

from __future__ import annotations

import dataclasses
import os
import logging
import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from keras import ops

from kbert.training.data import LabelMap, check_known_tokens
from kbert.training.pipeline import batches_by_length, make_dataset
from kbert.training.precision import model_dtype
from kbert.errors import DataError, KbertError
from kbert.layers.checks import traced_once
from kbert.models import naming
from kbert.models.heads import DEFAULT_TOKEN_HEAD, TOKEN_HEADS
from kbert.training.task import Task, TrainingData, read_training_file
from kbert.tasks.labelling import (Span, TaggedSentence, detect_scheme, entity_scores, read_tagged,
                                   spans, tags_from_spans)

UNITS = {"char": r"\S", "word": r"\S+"}


def detect_unit(sentences: Sequence[TaggedSentence], path: str = "data") -> str:
    """`char` unless a tenth or more of the tokens are several characters long (words), else `word`.

    A character-level file (MSRA's) may hold a few longer tokens (`１９９７年`,
    an English word): they stay units of their own in training, and raw text is
    cut into characters at prediction; a warning names the first.

    Example:
    >>> detect_unit([TaggedSentence(("北", "京"), ("B-LOC", "E-LOC"), 1)])
    'char'
    """
    longer = [(sentence.line + index, token) for sentence in sentences
              for index, token in enumerate(sentence.tokens) if len(token) > 1]
    total = sum(len(sentence.tokens) for sentence in sentences)
    if len(longer) >= WORD_SHARE * total:
        return "word"
    if longer:
        line, token = longer[0]
        logging.getLogger("kbert").warning(
            "%s: %d of %d tokens are several characters long (first: line %d, %r); the tokens are "
            "characters, so raw text is cut into characters at prediction", path, len(longer), total, line, token)
    return "char"


WORD_SHARE = 0.1  # tokens several characters long, of all, from which a file is word-level


def split_units(text: str, unit: str) -> List[Tuple[int, int]]:
    """Character offsets `(start, end)` of the units of a raw text.

    Example:
    >>> split_units("张三 去了", "char"), split_units("John  lives", "word")
    ([(0, 1), (1, 2), (3, 4), (4, 5)], [(0, 4), (6, 11)])
    """
    return [match.span() for match in re.finditer(UNITS[unit], text)]


@dataclasses.dataclass
class Chunk:
    """A run of a sentence's units that fits `maxlen`, encoded.

    Args:
        start: the index of its first unit in the sentence.
        token_ids: `[CLS]`, the units' pieces, `[SEP]`.
        owners: for each piece, the index of its unit within the chunk.
    """

    start: int
    token_ids: List[int]
    owners: List[int]

    @property
    def size(self) -> int:
        """Number of units."""
        return self.owners[-1] + 1 if self.owners else 0

    def piece_span(self, start: int, end: int) -> Tuple[int, int]:
        """The pieces `[first, last + 1)` of the chunk's units `[start, end)`."""
        return self.owners.index(start), len(self.owners) - self.owners[::-1].index(end - 1)

    def unit_span(self, start: int, end: int) -> Tuple[int, int]:
        """The sentence's units `[start, end)` whose pieces include pieces `[start, end)`."""
        return self.start + self.owners[start], self.start + self.owners[end - 1] + 1


class UnitEncoder:
    """Cuts sentences of units into WordPiece chunks of at most `maxlen` tokens.

    Args:
        tokenizer: a `kbert.Tokenizer`.
        maxlen: the longest chunk, `[CLS]` and `[SEP]` included.

    Example:
    >>> from kbert.tokenizers.wordpiece import Tokenizer
    >>> vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "北": 4, "京": 5, "play": 6, "##ing": 7}
    >>> encoder = UnitEncoder(Tokenizer(vocab), maxlen=5)
    >>> [(chunk.start, chunk.token_ids, chunk.owners) for chunk in encoder.chunks(["北", "京", "playing"])]
    [(0, [2, 4, 5, 3], [0, 1]), (2, [2, 6, 7, 3], [0, 0])]
    """

    def __init__(self, tokenizer, maxlen: int):
        self.tokenizer, self.maxlen, self.budget = tokenizer, maxlen, maxlen - 2
        self._pieces: Dict[str, List[int]] = {}
        self._unknown = tokenizer.unk_id

    def pieces(self, units: Sequence[str]) -> List[List[int]]:
        """The piece ids of each unit; one that normalizes to nothing is `[UNK]`, so that it keeps a place."""
        new = sorted(set(units) - self._pieces.keys())
        for unit, (ids, _) in zip(new, self.tokenizer.encode_all(new)):
            self._pieces[unit] = ids[1:-1][:self.budget] or [self._unknown]
        return [self._pieces[unit] for unit in units]

    def chunks(self, units: Sequence[str]) -> List[Chunk]:
        """The sentence in the fewest chunks that fit, cut between units."""
        chunks, ids, owners, start = [], [], [], 0
        for index, pieces in enumerate(self.pieces(units)):
            if len(ids) + len(pieces) > self.budget:
                chunks.append(self._chunk(start, ids, owners))
                ids, owners, start = [], [], index
            ids += pieces
            owners += [index - start] * len(pieces)
        chunks.append(self._chunk(start, ids, owners))
        return chunks

    def _chunk(self, start: int, ids: List[int], owners: List[int]) -> Chunk:
        return Chunk(start, [self.tokenizer.cls_id, *ids, self.tokenizer.sep_id], owners)


def chunk_entities(chunk: Chunk, entities: Sequence[Span]) -> List[Span]:
    """The sentence's entities inside `chunk`, as piece spans (an entity across a cut is clipped to it)."""
    inside = []
    for kind, start, end in entities:
        start, end = max(start - chunk.start, 0), min(end - chunk.start, chunk.size)
        if start < end:
            inside.append((kind, *chunk.piece_span(start, end)))
    return inside


class NerTask(Task):
    """Sequence labelling of tagged files; the kept epoch is the best validation entity F1.

    Args:
        head: one of `TOKEN_HEADS`.
    """

    name = "ner"
    score_name = "val_entity_f1"
    score_label = "validation entity F1"
    reads_tokenizer_json = True  # each unit is tokenized on its own, as transformers' is_split_into_words does

    def __init__(self, head: str = DEFAULT_TOKEN_HEAD):
        if head not in TOKEN_HEADS:
            raise KbertError(f"unknown head {head!r}; expected one of {', '.join(TOKEN_HEADS)}")
        self.head = head

    @classmethod
    def from_options(cls, options) -> "NerTask":
        return cls(options.head)

    def read(self, tokenizer, train_path: str, valid_path: Optional[str], num_labels: Optional[int],
             options) -> TrainingData:
        if options.columns:
            raise KbertError("--columns: a tagger reads token<TAB>tag files, which have no named columns")
        sentences, report = read_training_file(read_tagged, train_path, options)
        scheme = detect_scheme(sentences, train_path)
        types = sorted({kind for sentence in sentences for kind, _, _ in spans(sentence.tags)})
        if not types:
            raise DataError(f"{train_path}: no entities: every tag is O")
        labels = LabelMap(types if self.head == "global_pointer" else scheme_tags(types, scheme))
        if num_labels is not None and num_labels != len(labels):
            raise DataError(f"{train_path}: the data makes {len(labels)} labels ({', '.join(labels.names)}) "
                            f"but --num-labels is {num_labels}")
        self.encoder = UnitEncoder(tokenizer, options.maxlen)
        check_known_tokens(train_path, (tokenizer.encode(" ".join(sentence.tokens))[0] for sentence in sentences),
                           tokenizer)
        examples = Examples(self.encoder, labels, scheme, self.head)
        train = examples.dataset(sentences, options.batch_size, shuffle=options.shuffle, seed=options.seed,
                                 bucketing=options.bucketing)
        valid, valid_report, valid_sentences = None, None, []
        if valid_path:
            valid_sentences, valid_report = read_training_file(read_tagged, valid_path, options)
            _check_types(valid_sentences, types, valid_path)
            valid = examples.dataset(valid_sentences, options.batch_size).batches
        state = {"scheme": scheme, "unit": detect_unit(sentences, train_path), "types": types,
                 "head": self.head, "examples": len(sentences), "chunks": train.chunks}
        return TrainingData(train.batches, valid, labels, len(train.batches), str(report),
                            str(valid_report) if valid_report else None, state, valid_sentences)

    def build(self, bert, num_labels: int, options):
        from kbert.builder import build_token_classifier

        return build_token_classifier(bert, num_labels, head=self.head,
                                      crf_lr_multiplier=options.crf_lr_multiplier, name="tagger")

    def compile_args(self, model) -> dict:
        if self.head == "crf":
            crf = model.get_layer(naming.CRF)
            return {"loss": crf.sparse_loss, "metrics": [crf.sparse_accuracy]}
        if self.head == "softmax":
            return {"loss": "sparse_categorical_crossentropy", "metrics": ["accuracy"]}
        return {"loss": SpanCrossEntropy()}

    def validation_score(self, model, data: TrainingData):
        if not data.valid_examples:
            return lambda logs: None
        tagger = Tagger(model, self.encoder, data.labels, data.state)
        truth = [spans(sentence.tags) for sentence in data.valid_examples]
        units = [sentence.tokens for sentence in data.valid_examples]

        def entity_f1(logs: dict) -> float:
            logs[self.score_name] = entity_scores(truth, tagger.entities(units))["overall"]["f1"]
            return logs[self.score_name]

        return entity_f1


def scheme_tags(types: Sequence[str], scheme: str) -> List[str]:
    """Every tag of `scheme` for the entity `types`, `O` first (so padding, label 0, is `O`).

    Example:
    >>> scheme_tags(["LOC", "PER"], "BIO")
    ['O', 'B-LOC', 'I-LOC', 'B-PER', 'I-PER']
    """
    prefixes = {"BIO": "BI", "BIOES": "BIES", "BMES": "BMES"}[scheme]
    return ["O"] + [f"{prefix}-{kind}" for kind in types for prefix in prefixes]



def _check_types(sentences: Sequence[TaggedSentence], types: Sequence[str], path: str) -> None:
    for sentence in sentences:
        for kind, start, _ in spans(sentence.tags):
            if kind not in types:
                raise DataError(f"{path}, line {sentence.line + start}: entity type {kind!r} is not among "
                                f"the training data's ({', '.join(types)})")


@dataclasses.dataclass
class EncodedBatches:
    """A dataset of chunks and the number of chunks."""

    batches: object
    chunks: int


class Examples:
    """Turns tagged sentences into chunks with their targets: tag ids, or entity spans for GlobalPointer."""

    def __init__(self, encoder: UnitEncoder, labels: LabelMap, scheme: str, head: str):
        self.encoder, self.labels, self.scheme, self.head = encoder, labels, scheme, head
        self._ids = {name: index for index, name in enumerate(labels.names)}

    def dataset(self, sentences: Sequence[TaggedSentence], batch_size: int, *, shuffle: bool = False,
                seed: int = 0, bucketing: bool = False) -> EncodedBatches:
        encoded, targets = [], []
        for sentence in sentences:
            entities = spans(sentence.tags)
            for chunk in self.encoder.chunks(sentence.tokens):
                encoded.append((chunk.token_ids, [0] * len(chunk.token_ids)))
                targets.append(self._target(chunk, chunk_entities(chunk, entities)))
        batches = make_dataset(encoded, targets, batch_size, shuffle=shuffle, seed=seed, bucketing=bucketing,
                               pad_ids=(self.encoder.tokenizer.pad_id,))
        return EncodedBatches(batches, len(encoded))

    def _target(self, chunk: Chunk, entities: List[Span]) -> List:
        if self.head == "global_pointer":
            # [type, first, last] in token positions ([CLS] is position 0).
            return np.array([[self._ids[kind], start + 1, end] for kind, start, end in entities],
                            dtype=np.int32).reshape(-1, 3)  # (0, 3) without entities: still rows of 3
        tags = tags_from_spans(len(chunk.owners), entities, self.scheme)
        return [0] + [self._ids[tag] for tag in tags] + [0]


class SpanCrossEntropy:
    """GlobalPointer's loss from entity spans: `[batch, k, 3]` rows `(type, first, last)`, -1 padded.

    The dense target `[batch, types, n, n]` is made inside the graph, so the
    data pipeline carries a few numbers per entity instead of `types·n²`.
    """

    def __call__(self, y_true, y_pred, sample_weight=None):
        return self.call(y_true, y_pred)

    def call(self, y_true, y_pred):
        from kbert.training.losses import global_pointer_crossentropy

        types, length = y_pred.shape[1], ops.shape(y_pred)[2]
        y_true = ops.reshape(ops.cast(y_true, "int32"), (ops.shape(y_pred)[0], -1, 3))
        real = ops.cast(y_true[:, :, :1] >= 0, y_pred.dtype)  # -1 rows pad the entities
        kinds, firsts, lasts = (ops.one_hot(y_true[:, :, column], size, dtype=y_pred.dtype)
                                for column, size in enumerate((types, length, length)))
        dense = ops.einsum("bkt,bki,bkj->btij", kinds * real, firsts, lasts)
        return ops.mean(global_pointer_crossentropy(ops.minimum(dense, 1), y_pred))


class Tagger:
    """A trained tagger: finds the entities of sentences of units.

    Args:
        model: the tagger (`build_token_classifier`'s model).
        encoder: the `UnitEncoder` it was trained with.
        labels: its tags (or entity types, for GlobalPointer).
        state: training.json's `scheme`, `head` and `unit`.
    """

    def __init__(self, model, encoder: UnitEncoder, labels: LabelMap, state: dict):
        self.model, self.encoder, self.labels = model, encoder, labels
        self.head, self.unit = state["head"], state["unit"]
        # One trace for every batch shape (no model: a tagger that only maps decoded tags back to spans).
        self._decode = traced_once(self.decode, lambda tf: [tf.TensorSpec([None, None], tf.int32)] * 2,
                                   model.weights if model is not None else [])

    def entities(self, sentences: Sequence[Sequence[str]], batch_size: int = 64,
                 bucketing: bool = True) -> List[List[Span]]:
        """Each sentence's entities `(type, start, end)`, in units (end exclusive)."""
        chunks, owners = [], []
        for index, units in enumerate(sentences):
            for chunk in self.encoder.chunks(list(units)):
                chunks.append(chunk)
                owners.append(index)
        found: List[List[Span]] = [[] for _ in sentences]
        for rows, features in self.batches(chunks, batch_size, bucketing):
            decoded = ops.convert_to_numpy(self._decode(*(ops.convert_to_tensor(f) for f in features)))
            for chunk_index, row in zip(rows, _entity_rows(decoded) if self.head == "global_pointer" else decoded):
                found[owners[chunk_index]] += self._spans(chunks[chunk_index], row)
        return [sorted(set(entities), key=lambda e: (e[1], e[2], e[0])) for entities in found]

    def batches(self, chunks: Sequence[Chunk], batch_size: int = 64, bucketing: bool = True):
        """`(rows, (token_ids, segment_ids))` of the chunks, batched by length and padded with the tokenizer's
        padding id (`batches_by_length`)."""
        encoded = [(chunk.token_ids, [0] * len(chunk.token_ids)) for chunk in chunks]
        return batches_by_length(encoded, batch_size, bucketing, maxlen=self.encoder.maxlen,
                                 pad_id=self.encoder.tokenizer.pad_id)

    def _spans(self, chunk: Chunk, decoded: Sequence) -> List[Span]:
        """The sentence's entities in one chunk's decoded output: tag ids, or `(type, first, last)` rows."""
        size = len(chunk.owners)
        if self.head == "global_pointer":
            return [(self.labels.names[kind], *chunk.unit_span(first - 1, last))
                    for kind, first, last in decoded if 1 <= first <= last <= size]
        tags = [self.labels.names[index] for index in decoded[1:size + 1]]
        return [(kind, *chunk.unit_span(start, end)) for kind, start, end in spans(tags)]

    def decode(self, token_ids, segment_ids):
        """The head's answer in the graph: tag ids `[batch, length]` (a CRF's Viterbi path, a softmax's
        argmax), or a GlobalPointer's entity hits `[batch, types, length, length]`."""
        return getattr(self, f"_decode_{self.head}")(token_ids, segment_ids)

    def _decode_crf(self, token_ids, segment_ids):
        from kbert.layers.crf import viterbi_decode

        emissions = self.model([token_ids, segment_ids], training=False)
        outside = [self.labels.names.index("O")]
        return viterbi_decode(emissions, self.model.get_layer(naming.CRF).trans, starts=outside, ends=outside)

    def _decode_softmax(self, token_ids, segment_ids):
        return ops.argmax(self.model([token_ids, segment_ids], training=False), axis=-1)

    def _decode_global_pointer(self, token_ids, segment_ids):
        return self.model([token_ids, segment_ids], training=False) > 0


def _entity_rows(hits: np.ndarray) -> List[np.ndarray]:
    """Each example's `(type, first, last)` rows of a GlobalPointer's positive scores `[batch, types, n, n]`."""
    found = np.argwhere(hits)  # [m, 4]: example, type, first, last
    return [found[found[:, 0] == example, 1:] for example in range(len(hits))]


def load_tagger(model_dir: "str | os.PathLike[str]") -> Tagger:
    """The tagger of a model directory written by `kbert train --task ner`."""
    from kbert.training.model_dir import load_model

    loaded = load_model(model_dir, NerTask)
    encoder = UnitEncoder(loaded.tokenizer, loaded.options.maxlen)
    return Tagger(loaded.model, encoder, loaded.labels, loaded.state)


def evaluate(model_dir: str, data_path: str, batch_size: int = 64, bucketing: bool = True) -> dict:
    """Entity-level precision, recall and F1 per type and overall (exact span and type) on a tagged file."""
    with model_dtype():  # --dtype auto's choice (the CLI's, where it runs inside one)
        tagger = load_tagger(model_dir)
    sentences, report = read_tagged(data_path)
    truth = [spans(sentence.tags) for sentence in sentences]
    found = tagger.entities([sentence.tokens for sentence in sentences], batch_size, bucketing)
    return {"data": str(report), "scores": entity_scores(truth, found)}


def predict(model_dir: str, texts: Sequence[str], batch_size: int = 64, bucketing: bool = True) -> List[List[dict]]:
    """The entities of each text: `type`, `start`, `end` (character offsets, end exclusive) and `text`."""
    return find_entities(load_tagger(model_dir), texts, batch_size, bucketing)


def find_entities(tagger: Tagger, texts: Sequence[str], batch_size: int = 64,
                  bucketing: bool = True) -> List[List[dict]]:
    """`predict` with a loaded tagger."""
    if not len(texts):
        raise KbertError("no texts to predict")
    offsets = [split_units(text, tagger.unit) for text in texts]
    units = [[text[start:end] for start, end in places] for text, places in zip(texts, offsets)]
    found = tagger.entities(units, batch_size, bucketing)
    return [[{"type": kind, "start": places[start][0], "end": places[end - 1][1],
              "text": text[places[start][0]:places[end - 1][1]]} for kind, start, end in entities]
            for text, places, entities in zip(texts, offsets, found)]
