"""Sequence-to-sequence fine-tuning: UniLM or T5 on source/target pairs, and generation with the cache.

Data: `source<TAB>target` a line, or a table or JSON Lines naming the
source and target (`read_pairs`; a target may be empty: then the model
learns to stop at once).
Each pair is `[CLS] source [SEP] target [SEP]`, the source in segment 0 and
the target in segment 1, so UniLM's mask (`application="unilm"`) lets the
source see itself and the target see the source and its own past; `maxlen`
truncates the longer of the two first. The loss is bert4keras's: next-token
cross-entropy at target positions only (the label at position t is token
t + 1 when that token is in the target, else 0, `[PAD]`, which the loss
ignores). The kept epoch has the best validation target-token accuracy
(teacher forced).

With `model="t5"`, `"t5.1.1"` or `"mt5.1.1"`, T5's encoder-decoder is
trained instead: the encoder reads `[CLS] source [SEP]`, the decoder
`[CLS] target` (the target shifted right, `[CLS]` its start token, as T5
PEGASUS does), and the label at decoder position t is target token t + 1,
`[SEP]` last; each is cut to `maxlen` on its own. With a SentencePiece
vocabulary (`SpTokenizer`, a `.model` file) the framing is Google's T5's:
`source </s>` in, the decoder starting at 0 (the padding id) and learning
`target </s>`.

`predict` and `evaluate` generate with `kbert.generate`
(greedy or beam search, key/value cache); `evaluate` reports exact match and
character F1 against the references.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import os
from typing import List, Mapping, Optional, Sequence, Tuple

import numpy as np

from kbert.errors import KbertError
from kbert.models.registry import get_family
from kbert.training.data import LabelMap, check_known_tokens
from kbert.training.pipeline import make_dataset
from kbert.training.precision import model_dtype
from kbert.training.records import DataReport, Fields, parse_rows, read_records
from kbert.training.task import Task, TrainingData, read_training_file

IGNORED = 0  # the label of padding (T5: of decoder positions past the target): [PAD]'s id, never a target


@dataclasses.dataclass(frozen=True)
class Pair:
    """A source text, its target text, and the line it was read from."""

    source: str
    target: str
    line: int


SOURCE_NAMES = ("source", "src", "input", "text", "content", "abstract")
TARGET_NAMES = ("target", "tgt", "output", "title", "summary")
PAIRS = Fields({"source": SOURCE_NAMES, "target": TARGET_NAMES}, ("source", "target"), {2: ("source", "target")})
SOURCES = Fields({"source": SOURCE_NAMES}, ("source",), {1: ("source",)})


def read_pairs(path: "str | os.PathLike[str]", *, skip_malformed: bool = False,
               columns: Optional[Mapping[str, str]] = None) -> Tuple[List[Pair], DataReport]:
    """Reads source/target pairs: `source<TAB>target` rows, or a table or JSON Lines naming the columns.

    The format is read from the content as for classification
    (`kbert.training.records`); a header or JSON key may call the fields
    `source`/`src`/`input`/`text`/`content`/`abstract` and
    `target`/`tgt`/`output`/`title`/`summary`, or `columns` names them. A
    malformed line raises `DataError` naming the file and line, or with
    `skip_malformed` is skipped and counted in the report.

    Example:
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "train.tsv")
    >>> _ = open(path, "w", encoding="utf-8").write("张三去了北京\\tPER:张三；LOC:北京\\n今天很好\\t\\n")
    >>> [(p.source, p.target) for p in read_pairs(path)[0]]
    [('张三去了北京', 'PER:张三；LOC:北京'), ('今天很好', '')]
    """
    path = os.fspath(path)
    rows, layout, _ = read_records(path, PAIRS, columns)
    return parse_rows(path, rows, _pair, skip_malformed, "no source/target pairs", layout)


def read_sources(path: "str | os.PathLike[str]", columns: Optional[Mapping[str, str]] = None) -> List[str]:
    """The sources of a prediction input: a headerless file is one source a line (tabs kept)."""
    path = os.fspath(path)
    rows, layout, _ = read_records(path, SOURCES, columns)
    return [pair.source for pair in parse_rows(path, rows, lambda row, line: _pair({**row, "target": ""}, line),
                                               False, "no sources", layout)[0]]


def _pair(row: dict, line: int) -> Pair:
    source, target = row["source"], row["target"]
    if not source or not source.strip():
        raise ValueError("empty source")
    if target is None:
        raise ValueError("missing target")
    return Pair(source, target, line)


def encode_pairs(tokenizer, pairs: Sequence[Pair], maxlen: int, encoder_decoder: bool = False):
    """The model's inputs for each pair, its labels, and the lines of the pairs `maxlen` cut.

    UniLM: token ids, segment ids and the positions whose next token is in the
    target (the source's last `[SEP]` and every target token but the last);
    the labels are those next tokens, one per position. T5: source and decoder
    ids; a label per decoder position.
    """
    if encoder_decoder:
        return _encode_for_t5(tokenizer, pairs, maxlen)
    encoded, labels, cut = [], [], []
    for pair, (token_ids, segment_ids) in zip(pairs, tokenizer.encode_all(
            [pair.source for pair in pairs], [pair.target for pair in pairs], maxlen=maxlen)):
        positions = [index for index, segment in enumerate(segment_ids[1:]) if segment]
        encoded.append((token_ids, segment_ids, positions))
        labels.append([token_ids[index + 1] for index in positions])
        if len(token_ids) == maxlen and len(tokenizer.encode(pair.source, pair.target)[0]) > maxlen:
            cut.append(pair.line)
    return encoded, labels, cut


def decoder_start_id(tokenizer) -> int:
    """The id T5's decoder starts from: WordPiece's `[CLS]` (T5 PEGASUS), which opens every encoded text;
    SentencePiece's padding id 0 (Google's T5 and mT5, and bert4keras's scripts)."""
    return tokenizer.cls_id if tokenizer.cls_id is not None else tokenizer.pad_token_id


def _encode_for_t5(tokenizer, pairs: Sequence[Pair], maxlen: int):
    start = decoder_start_id(tokenizer)
    sources = tokenizer.encode_all([pair.source for pair in pairs], maxlen=maxlen)
    targets = tokenizer.encode_all([pair.target for pair in pairs], maxlen=maxlen)
    # The labels are the target and its end token; the decoder reads them shifted right, after the start.
    labels = [target[1:] if target[:1] == [start] else target for target, _ in targets]
    encoded = [(source, [start] + label[:-1]) for (source, _), label in zip(sources, labels)]
    cut = [pair.line for pair, (source, _), (target, _) in zip(pairs, sources, targets)
           if maxlen in (len(source), len(target))
           and maxlen < max(len(tokenizer.encode(pair.source)[0]), len(tokenizer.encode(pair.target)[0]))]
    return encoded, labels, cut


def _with_cuts(report: DataReport, cut: Sequence[int], maxlen: int) -> str:
    """The report, and how many pairs `maxlen` cut (logged as a warning)."""
    if not cut:
        return str(report)
    lines = ", ".join(map(str, cut[:10])) + (", ..." if len(cut) > 10 else "")
    note = (f"{report}; {len(cut)} pairs longer than --maxlen {maxlen} tokens were cut, the longer text "
            f"first (lines {lines})")
    logging.getLogger("kbert").warning("%s", note)
    return note


def target_accuracy():
    """A Keras metric: the share of target tokens (label not 0) whose most likely token is the label."""
    import keras
    from keras import ops

    class TargetAccuracy(keras.metrics.Metric):
        def __init__(self, name="target_accuracy", **kwargs):
            super().__init__(name=name, **kwargs)
            self.hits = self.add_variable(shape=(), initializer="zeros", name="hits")
            self.count = self.add_variable(shape=(), initializer="zeros", name="count")

        def update_state(self, y_true, y_pred, sample_weight=None):
            labels = ops.cast(y_true, "int32")
            mask = ops.cast(labels != IGNORED, "float32")
            hits = ops.cast(ops.argmax(y_pred, axis=-1) == labels, "float32")
            self.hits.assign_add(ops.sum(hits * mask))
            self.count.assign_add(ops.sum(mask))

        def result(self):
            return self.hits / ops.maximum(self.count, 1.0)

    return TargetAccuracy()


class Seq2SeqTask(Task):
    """UniLM (or, for `model="t5"`, `"t5.1.1"`, `"mt5.1.1"`, T5) fine-tuning on pairs; the kept epoch has
    the best validation target-token accuracy."""

    name = "seq2seq"
    score_name = "val_target_accuracy"
    score_label = "validation target-token accuracy"

    def __init__(self, model: Optional[str] = None):
        part = getattr(get_family(model), "part", None) if model else None
        if part not in (None, "both"):
            raise KbertError(f"--task seq2seq trains a whole T5 (--model t5, t5.1.1 or mt5.1.1), not {model!r}, "
                             "one of its stacks")
        self.encoder_decoder = part == "both"
        self.reads_sentencepiece = self.encoder_decoder

    @classmethod
    def from_options(cls, options) -> "Seq2SeqTask":
        return cls(options.model)

    def model_config(self, config):
        """T5's decoder hides no token, as Google's: a start id of 0 (SentencePiece) is read and its
        prediction trained; right padding is out of every real position's view (the causal mask)."""
        return dataclasses.replace(config, decoder_mask_zero=False) if self.encoder_decoder else config

    def backbone_args(self) -> dict:
        return {} if self.encoder_decoder else {"application": "unilm", "with_mlm": True}

    def read(self, tokenizer, train_path: str, valid_path: Optional[str], num_labels: Optional[int],
             options) -> TrainingData:
        if num_labels is not None:
            raise KbertError("--num-labels has no meaning for --task seq2seq")
        pairs, report = read_training_file(read_pairs, train_path, options)
        encoded, labels, cut = encode_pairs(tokenizer, pairs, options.maxlen, self.encoder_decoder)
        check_known_tokens(train_path, (inputs[0] for inputs in encoded), tokenizer)
        # T5's labels follow the decoder's ids (the second input), UniLM's its target positions (the third).
        follow = 1 if self.encoder_decoder else 2
        train = make_dataset(encoded, labels, options.batch_size, shuffle=options.shuffle, seed=options.seed,
                             bucketing=options.bucketing, labels_follow=follow)
        valid, valid_report = None, None
        if valid_path:
            valid_pairs, valid_report = read_training_file(read_pairs, valid_path, options)
            valid_encoded, valid_labels, valid_cut = encode_pairs(tokenizer, valid_pairs, options.maxlen,
                                                                  self.encoder_decoder)
            valid = make_dataset(valid_encoded, valid_labels, options.batch_size, labels_follow=follow)
            valid_report = _with_cuts(valid_report, valid_cut, options.maxlen)
        # What generation keeps free after a long source: a median target, its [SEP] included.
        median = int(np.median([len(row) for row in labels]))
        return TrainingData(train, valid, LabelMap([]), len(train),
                            _with_cuts(report, cut, options.maxlen), valid_report, {"median_target_tokens": median})

    def build(self, bert, num_labels: int, options):
        return bert  # the UniLM model with its MLM head, or the whole T5, is the model

    def training_model(self, model):
        """UniLM trains its MLM head on the target positions only (`build_masked_lm`): the
        vocabulary-wide softmax of every source and padding position is never computed."""
        from kbert.builder import build_masked_lm

        return model if self.encoder_decoder else build_masked_lm(model, name="unilm_on_targets")

    def compile_args(self, model) -> dict:
        import keras

        return {"loss": keras.losses.SparseCategoricalCrossentropy(ignore_class=IGNORED),
                "metrics": [target_accuracy()]}



def predict(model_dir: str, sources: Sequence[str], *, beam_size: int = 1, max_new_tokens: Optional[int] = None,
            batch_size: int = 64) -> List[str]:
    """The generated target text of each source (greedy, or beam search with `beam_size` > 1).

    `max_new_tokens` defaults to the room the `maxlen` of training leaves
    after each source (UniLM: and is capped by it). A source is cut to leave
    the median training target's length (its `[SEP]` included), or
    `max_new_tokens` when that is smaller; a warning counts the sources cut. A source's target does not depend on the
    other sources.
    """
    if not len(sources):
        raise KbertError("no texts to predict")
    return generate_targets(load_generator(model_dir), sources, beam_size, max_new_tokens, batch_size)


def load_generator(model_dir: "str | os.PathLike[str]"):
    """The model directory of `kbert train --task seq2seq`, loaded (`kbert.training.model_dir.TrainedModel`)."""
    from kbert.training.model_dir import load_model

    return load_model(model_dir, Seq2SeqTask)


def generate_targets(loaded, sources: Sequence[str], beam_size: int, max_new_tokens: Optional[int],
                     batch_size: int) -> List[str]:
    from kbert.generation import generate

    maxlen, tokenizer = loaded.options.maxlen, loaded.tokenizer
    if Seq2SeqTask.from_options(loaded.options).encoder_decoder:
        # T5: the source and the target each had maxlen tokens in training; the decoder starts as in training.
        reserve, budget, decoder_start = 0, maxlen, {"start_id": decoder_start_id(tokenizer)}
    else:
        # A source is cut only as far as a typical target needs; a larger --max-new-tokens caps the target
        # (which never runs past maxlen), it does not shorten the sources.
        typical = loaded.state.get("median_target_tokens") or maxlen // 4
        reserve = min(max_new_tokens or typical, typical)
        budget, decoder_start = max(maxlen - reserve, 3), {}  # [CLS], a token of the source, [SEP]
    prompts = [ids for ids, _ in tokenizer.encode_all(list(sources), maxlen=budget)]
    _warn_of_cut_sources(tokenizer, sources, prompts, budget, maxlen, reserve)
    # Each source gets the room its own length leaves (at most max_new_tokens): batches hold sources of
    # one room, so a target never depends on the other sources.
    rooms = [max_new_tokens or maxlen - 1 if decoder_start else min(maxlen - len(prompt), max_new_tokens or maxlen)
             for prompt in prompts]
    order = sorted(range(len(prompts)), key=lambda row: (rooms[row], len(prompts[row])))
    targets: List[str] = [""] * len(prompts)
    for room, group in itertools.groupby(order, key=lambda row: rooms[row]):
        group = list(group)
        for start in range(0, len(group), batch_size):
            rows = group[start:start + batch_size]
            generated = generate(loaded.model, [prompts[row] for row in rows], max_new_tokens=room,
                                 end_id=tokenizer.sep_id, strategy="beam" if beam_size > 1 else "greedy",
                                 beam_size=beam_size, **decoder_start)
            for row, ids in zip(rows, generated):
                targets[row] = tokenizer.decode(ids)
    return targets


def _warn_of_cut_sources(tokenizer, sources: Sequence[str], prompts, budget: int, maxlen: int,
                         reserve: int) -> None:
    cut = [index + 1 for index, prompt in enumerate(prompts)
           if len(prompt) == budget and len(tokenizer.encode(sources[index])[0]) > budget]
    if cut:
        room = f" less {reserve} kept for the target" if reserve else ""
        logging.getLogger("kbert").warning(
            "%d of %d sources are longer than %d tokens (the --maxlen %d of training%s) and were cut "
            "(sources %s)", len(cut), len(sources), budget, maxlen, room,
            ", ".join(map(str, cut[:10])) + (", ..." if len(cut) > 10 else ""))


def evaluate(model_dir: str, data_path: str, *, beam_size: int = 1, max_new_tokens: Optional[int] = None,
             batch_size: int = 64, columns: Optional[Mapping[str, str]] = None) -> dict:
    """Exact match and mean character F1 of generated targets against the file's targets.

    A reference is compared as the model can write it: through the model's
    tokenizer and back (lower-cased if it lower-cases, `[UNK]` for unknown
    characters), and both texts without spaces (decoding re-spaces non-CJK text).
    """
    with model_dtype():  # --dtype auto's choice (the CLI's, where it runs inside one)
        loaded = load_generator(model_dir)
    pairs, report = read_pairs(data_path, columns=columns)
    generated = generate_targets(loaded, [pair.source for pair in pairs], beam_size, max_new_tokens, batch_size)
    tokenizer = loaded.tokenizer
    references = [_unspaced(tokenizer.decode(tokenizer.encode(pair.target)[0])) for pair in pairs]
    outputs = [_unspaced(text) for text in generated]
    return {"data": str(report), "exact_match": float(np.mean([a == b for a, b in zip(outputs, references)])),
            "char_f1": float(np.mean([char_f1(a, b) for a, b in zip(outputs, references)])),
            "generated": generated}


def _unspaced(text: str) -> str:
    return "".join(text.split())


def char_f1(generated: str, reference: str) -> float:
    """F1 of the characters two texts share (as multisets); 1.0 when both are empty.

    Example:
    >>> round(char_f1("PER:张三", "PER:张四"), 3)
    0.833
    """
    if not generated and not reference:
        return 1.0
    shared = sum((collections.Counter(generated) & collections.Counter(reference)).values())
    if not shared:
        return 0.0
    precision, recall = shared / len(generated), shared / len(reference)
    return 2 * precision * recall / (precision + recall)
