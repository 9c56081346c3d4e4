"""Masked-language-model pre-training on plain text, with whole-word masking (`kbert pretrain`).

The text is one document or sentence a line, in a file or a directory of
files (read in name order; blank lines are skipped). Each line is tokenised
once and its words numbered (`whole_word`):

- `jieba`: jieba's words, as bert4keras's `pretraining/` masks Chinese; a
  word's characters are masked together. jieba also splits other text at
  spaces and punctuation, so an English word and its `##` pieces are one word.
- `wordpiece`: a word and its `##` pieces (English whole-word masking).
- `none`: every token on its own (BERT's original masking).

The lines are packed into full `maxlen` sequences and masked afresh every
epoch (`kbert.training.masking`); the validation text's masks are drawn once.
How lines share a row is `pack`: end to end, attention across them
(`stream`, the default, as Google's and bert4keras's pre-training data), or
each line a document of its own (`documents`: several to a row, positions
restarted, attention within it, masked as it would be alone; `none`: one a
row, padded).
The model is the backbone's MLM head on the masked positions
(`kbert.builder.build_masked_lm`), trained with cross-entropy on them; its
masked-token accuracy is the validation score.

The model directory is one `build_transformer_model` and `kbert train
--checkpoint` read: besides kbert's files it holds `bert_model.ckpt`, the
backbone and its MLM head under the family's original checkpoint names (or,
where TensorFlow is not installed or the family has no original checkpoint,
as Hugging Face's RoBERTa, `model.safetensors` under Hugging Face's names),
so it can be fine-tuned or pre-trained further.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from typing import Iterator, List, Optional, Sequence, Tuple

import keras
import numpy as np

from kbert.errors import DataError, KbertError, tensorflow_installed
from kbert.models.registry import get_family
from kbert.training.pipeline import batches_by_length
from kbert.training.data import LabelMap, check_known_tokens
from kbert.training.masking import (TRAINING, VALIDATION, MaskedBatches, max_predictions, pack_documents,
                                   pack_sequences)
from kbert.training.task import Task, TrainingData

CHECKPOINT_FILE = "bert_model.ckpt"  # the pre-trained weights' prefix in the model directory
STEPS_FILE = "steps.tsv"  # the training curve
_TOKENIZE_LINES = 2000  # lines tokenised per batch


def read_text(path: "str | os.PathLike[str]") -> Tuple[List[str], str]:
    """The non-blank lines of a text file, or of every file of a directory (in name order).

    Returns the lines and a report (files, lines, characters). A line that
    is not UTF-8 raises `DataError` naming its file and line.
    """
    path = os.fspath(path)
    files = _text_files(path)
    if not files:
        raise DataError(f"{path}: no text files to pre-train on")
    lines: List[str] = []
    for name in files:
        with open(name, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                try:
                    line = raw.decode("utf-8").strip()
                except UnicodeDecodeError as error:
                    raise DataError(f"{name}, line {number}: not UTF-8 text ({error.reason} at byte "
                                    f"{error.start}); convert the file to UTF-8") from None
                if line:
                    lines.append(line)
    if not lines:
        raise DataError(f"{path}: every line is blank; pre-training needs text")
    characters = sum(len(line) for line in lines)
    where = f"{len(files)} files in {path}" if os.path.isdir(path) else path
    return lines, f"{where}: {len(lines)} lines, {characters} characters"


def _text_files(path: str) -> List[str]:
    if not os.path.isdir(path):
        if not os.path.exists(path):
            raise DataError(f"{path}: no such file or directory")
        return [path]
    found = []
    for root, directories, names in os.walk(path):
        directories[:] = sorted(d for d in directories if not d.startswith("."))
        found += [os.path.join(root, name) for name in sorted(names) if not name.startswith(".")]
    return found


def tokenize_words(tokenizer, lines: Sequence[str], whole_word: str) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
    """Each line's token ids and each token's word number (0, 1, ...; a word's tokens share it).

    Example:
    >>> from kbert.tokenizers import Tokenizer
    >>> tokenizer = Tokenizer({"[CLS]": 0, "[SEP]": 1, "[UNK]": 2, "un": 3, "##able": 4, "to": 5})
    >>> [(ids.tolist(), words.tolist()) for ids, words in tokenize_words(tokenizer, ["unable to"], "wordpiece")]
    [([3, 4, 5], [0, 0, 1])]
    """
    split = _jieba_words() if whole_word == "jieba" else None
    for start in range(0, len(lines), _TOKENIZE_LINES):
        batch = lines[start:start + _TOKENIZE_LINES]
        for line, (ids, spans) in zip(batch, tokenizer.ids_and_offsets(batch)):
            ids = np.asarray(ids, dtype=np.int32)
            if whole_word == "none":
                words = np.arange(len(ids))
            elif whole_word == "wordpiece":
                words = np.cumsum(_starts_word(tokenizer, ids)) - 1
            else:
                starts = np.array([span[0] for span in spans], dtype=np.int64)
                word_starts = np.array([word_start for _, word_start, _ in split(line)], dtype=np.int64)
                # The word whose span holds the token's first character; numbered 0, 1, ... over the words
                # that have tokens (jieba also returns the spaces between words).
                words = np.unique(np.searchsorted(word_starts, starts, side="right") - 1, return_inverse=True)[1]
            yield ids, words.astype(np.int32)


def _starts_word(tokenizer, ids: np.ndarray) -> np.ndarray:
    """Whether each piece begins a word: all but WordPiece's `##` pieces, or (a `tokenizer.json` of byte-level
    BPE or SentencePiece pieces) those marked as following a space, `Ġ` or `▁`; the line's first always."""
    pieces = [tokenizer.id_to_token(int(index)) for index in ids]
    if tokenizer.wordpiece:
        starts = np.array([not piece.startswith("##") for piece in pieces], dtype=bool)
    else:
        starts = np.array([piece.startswith(("Ġ", "▁")) for piece in pieces], dtype=bool)
    starts[:1] = True
    return starts


def mask_token_id(tokenizer) -> int:
    """The id of the tokenizer's mask token: WordPiece's `[MASK]`, or a `tokenizer.json`'s own (RoBERTa's
    `<mask>`)."""
    found = tokenizer.mask_id
    if found is None:
        raise KbertError("the vocabulary has no mask token ([MASK] or <mask>), which pre-training puts in place "
                         "of the words it predicts; use the vocabulary the model was pre-trained with")
    return found


def _jieba_words():
    try:
        import jieba
    except ImportError:
        raise KbertError("whole-word masking with jieba needs the jieba package: pip install jieba "
                         "(or pass --whole-word wordpiece or none)") from None
    jieba.setLogLevel(logging.WARNING)
    return jieba.tokenize


class TrainingCurve(keras.callbacks.Callback):
    """Shows the tokens trained on per second in the progress bar, and writes the curve of the run.

    Every `every` steps, a row of `steps.tsv` in the run's directory: epoch,
    step, the epoch's running loss and masked-token accuracy, tokens a second
    (padding excluded). Rows are appended, so a resumed run continues the file.

    Args:
        path: the file to append to.
        tokens_per_batch: the average real tokens of a training batch.
        every: steps between rows.
    """

    COLUMNS = ("epoch", "step", "loss", "accuracy", "tokens_per_second")

    def __init__(self, path: str, tokens_per_batch: float, every: int = 20):
        super().__init__()
        self.path, self.tokens_per_batch, self.every = path, tokens_per_batch, every
        self.step = 0

    def on_train_begin(self, logs=None):
        if not os.path.exists(self.path):
            with open(self.path, "w", encoding="utf-8") as handle:
                handle.write("\t".join(self.COLUMNS) + "\n")

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.start, self.batches = epoch + 1, time.perf_counter(), 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        self.step += 1
        if logs is None:
            return
        logs["tokens_per_second"] = self.rate()
        if self.step % self.every == 0:
            row = (self.epoch, self.step, logs.get("loss"), logs.get("accuracy"), logs["tokens_per_second"])
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write("\t".join(str(float(value)) if i > 1 else str(value) for i, value in enumerate(row))
                             + "\n")

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["tokens_per_second"] = self.rate()

    def rate(self) -> float:
        return self.tokens_per_batch * self.batches / max(time.perf_counter() - self.start, 1e-9)


class MaskEpoch(keras.callbacks.Callback):
    """Sets the epoch that keys the training masks and order (`MaskedBatches.epoch`) before each epoch.

    Keras draws an epoch's batches after `on_epoch_begin`, so no batch of an
    epoch is masked with the previous epoch's key; a resumed run's epochs
    keep their own masks.
    """

    def __init__(self, batches: MaskedBatches):
        super().__init__()
        self.batches = batches

    def on_epoch_begin(self, epoch, logs=None):
        self.batches.epoch = epoch


class MaskedLanguageModelTask(Task):
    """Pre-training: predict masked (whole) words of plain text; the backbone with its MLM head is saved."""

    name = "mlm"
    score_name = "val_accuracy"
    score_label = "validation masked-token accuracy"
    reads_tokenizer_json = True

    def __init__(self, family: str = "bert", whole_word: str = "jieba", mask_rate: float = 0.15,
                 pack: str = "stream"):
        self.family, self.whole_word, self.mask_rate, self.pack = get_family(family), whole_word, mask_rate, pack
        if "with_mlm" not in self.family.heads or "encoder" not in self.family.applications:
            raise KbertError(f"pre-training trains an MLM head, which model={self.family.name!r} does not have; "
                             "kbert pretrain trains the encoder families (bert, roberta, albert, "
                             "albert_unshared, nezha, roformer, roformer_v2)")
        self.max_predictions: Optional[int] = None  # with documents apart: from the data (`read`)
        if not self.family.knows_hf_names and not tensorflow_installed():
            raise KbertError(f"kbert pretrain --model {self.family.name} without TensorFlow: its pre-trained "
                             "weights are written as a Google checkpoint, which needs TensorFlow (pip install "
                             "tensorflow); the families with Hugging Face names (bert, roberta, albert, nezha, "
                             "roformer) are written as safetensors without it")

    @classmethod
    def from_options(cls, options) -> "MaskedLanguageModelTask":
        return cls(options.model or "bert", options.whole_word, options.mask_rate, options.pack)

    def backbone_args(self) -> dict:
        return {"with_mlm": "linear"}  # logits: the loss takes the softmax itself, stably

    def read(self, tokenizer, train_path: str, valid_path: Optional[str], num_labels: Optional[int],
             options) -> TrainingData:
        if num_labels:
            raise KbertError("num_labels: pre-training predicts tokens of the vocabulary, not classes")
        dataset = functools.partial(self._dataset, tokenizer, options)
        train, train_report, steps, tokens = dataset(train_path, training=True)
        valid, valid_report = dataset(valid_path, training=False)[:2] if valid_path else (None, None)
        self.tokens_per_batch = tokens / steps
        if train.documents is not None:  # a row of short documents may hold more masks than maxlen's share
            self.max_predictions = max(batches.slots for batches in (train, valid) if batches is not None)
            for batches in (train, valid):
                if batches is not None:
                    batches.slots = self.max_predictions
        return TrainingData(train, valid, LabelMap([]), steps, train_report, valid_report,
                            state={"whole_word": self.whole_word, "mask_rate": self.mask_rate, "pack": self.pack})

    def _dataset(self, tokenizer, options, path: str, training: bool):
        """The masked batches of a text file, its report, batches per epoch and real tokens."""
        lines, report = read_text(path)
        words = tokenize_words(tokenizer, lines, self.whole_word)
        if self.pack == "stream":
            rows = pack_sequences(words, options.maxlen, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
            token_ids, documents = rows[0], None
        else:
            rows = documents = pack_documents(words, options.maxlen, tokenizer.cls_id, tokenizer.sep_id,
                                              several=self.pack == "documents", pad_id=tokenizer.pad_id)
            token_ids = documents.token_ids
        if not len(token_ids):
            raise DataError(f"{path}: no line has a token of the vocabulary ({tokenizer.vocab_size} tokens); "
                            "is it the vocabulary of this text?")
        tokens = int(np.count_nonzero(token_ids != tokenizer.pad_id))
        check_known_tokens(path, token_ids, tokenizer, refuse=True)
        report += f"; {len(token_ids)} sequences of {options.maxlen} tokens ({tokens} not padding"
        report += f", {sum(map(len, documents.spans))} documents)" if documents else ")"
        logging.getLogger("kbert").info("%s", report)
        batches = MaskedBatches(rows, options.batch_size, seed=options.seed,
                                stream=TRAINING if training else VALIDATION, shuffle=training and options.shuffle,
                                segments=self.family.takes_segments, positions=self.pack == "documents",
                                rate=self.mask_rate,
                                mask_id=mask_token_id(tokenizer), vocab_size=tokenizer.vocab_size)
        return batches, report, len(batches), tokens

    def build(self, bert, num_labels: int, options):
        if self.pack == "documents" and "unilm" not in self.family.applications:
            raise KbertError(f"--pack documents keeps attention within each document with an attention mask, "
                             f"which model={self.family.name!r} does not take; use --pack stream or none")
        self.max_predictions = self.max_predictions or max_predictions(options.maxlen, self.mask_rate)
        return bert  # the backbone and its MLM head: what is saved (a plain encoder however rows are packed)

    def training_model(self, model):
        from kbert.builder import build_masked_lm

        return build_masked_lm(model, self.max_predictions, packed=self.pack == "documents")

    def compile_args(self, model) -> dict:
        # Averaged over the masked positions (the weights), not over all max_predictions slots.
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight")
        return {"loss": loss, "weighted_metrics": [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]}

    def callbacks(self, data: TrainingData, directory: str) -> list:
        return [MaskEpoch(data.train), TrainingCurve(os.path.join(directory, STEPS_FILE), self.tokens_per_batch)]

    def finish(self, model, directory: str) -> None:
        """The kept epoch's backbone and MLM head as an original-format checkpoint, `bert_model.ckpt`, where
        TensorFlow is installed (it writes that format) and the family has one; else as Hugging Face's
        `model.safetensors`. The training loop has loaded the kept epoch's weights."""
        if tensorflow_installed() and self.family.google_absent is None:
            from kbert.checkpoints.google import save_google_checkpoint

            save_google_checkpoint(model, os.path.join(directory, CHECKPOINT_FILE))
        else:
            from kbert.checkpoints.hf import save_hf_weights

            save_hf_weights(model, directory)


MASK_MARK = "[MASK]"  # where a fill-mask text asks for a token


def fill_masks(loaded, texts: Sequence[str], top_k: int = 5, batch_size: int = 64) -> List[dict]:
    """The most probable tokens at each `[MASK]` of each text, from a pre-trained model directory.

    Args:
        loaded: the directory of `kbert pretrain`, loaded
            (`kbert.training.model_dir.load_model(path, MaskedLanguageModelTask)`).
        texts: texts with one or more `[MASK]` marks, each standing for one token.
        top_k: candidates given for each mark.
        batch_size: texts a batch.

    Returns:
        per text, `{"text", "masks": [{"candidates": [{"token", "probability"}, ...]}, ...],
        "filled"}`: the marks in order, and the text with each mark replaced by its best token.
    """
    tokenizer, maxlen = loaded.tokenizer, loaded.options.maxlen
    mask_id = mask_token_id(tokenizer)
    encoded = [(_with_mask_ids(tokenizer, text, mask_id, maxlen),) for text in texts]
    filled: List[dict] = [{}] * len(texts)
    for rows, (ids,) in batches_by_length(encoded, batch_size, maxlen=maxlen, pad_id=tokenizer.pad_id):
        inputs = [ids, np.zeros_like(ids)] if len(loaded.model.inputs) == 2 else [ids]
        logits = keras.ops.convert_to_numpy(loaded.model.predict_on_batch(inputs))
        for row, row_ids, row_logits in zip(rows, ids, logits):
            filled[row] = _filled(tokenizer, texts[row], row_logits[row_ids == mask_id], top_k)
    return filled


def _with_mask_ids(tokenizer, text: str, mask_id: int, maxlen: int) -> List[int]:
    """`[CLS]` the text's tokens `[SEP]`, each `[MASK]` mark one `[MASK]` id; a mark past maxlen is an error."""
    pieces = text.split(MASK_MARK)
    if len(pieces) == 1:
        raise KbertError(f"text {text[:40]!r}: no {MASK_MARK} to fill (a pre-trained model predicts the token at "
                         f"each {MASK_MARK} mark)")
    ids = [tokenizer.cls_id]
    for index, piece in enumerate(pieces):
        ids += tokenizer.encode(piece)[0][1:-1] if piece.strip() else []
        if index < len(pieces) - 1:
            ids.append(mask_id)
    if len(ids) + 1 > maxlen:
        raise KbertError(f"text {text[:40]!r}: {len(ids) + 1} tokens, more than the model's maxlen of {maxlen}")
    return ids + [tokenizer.sep_id]


def _token_text(tokenizer, index: int) -> str:
    """A candidate token as text: WordPiece's token (`##` pieces as they are), or a `tokenizer.json`'s piece
    decoded (`Ġeating` is `eating`)."""
    if tokenizer.wordpiece:
        return tokenizer.id_to_token(index)
    return tokenizer.decode([index]).strip()


def _filled(tokenizer, text: str, logits: np.ndarray, top_k: int) -> dict:
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    best = np.argsort(-probabilities, axis=-1)[:, :top_k]
    masks = [{"candidates": [{"token": _token_text(tokenizer, int(index)), "probability": float(row[index])}
                             for index in indices]} for row, indices in zip(probabilities, best)]
    pieces = text.split(MASK_MARK)
    filled = pieces[0] + "".join(mask["candidates"][0]["token"] + piece for mask, piece in zip(masks, pieces[1:]))
    return {"text": text, "masks": masks, "filled": filled}
