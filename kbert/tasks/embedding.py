"""Sentence embeddings trained contrastively (`kbert train --task embed`): pairs, triplets or scored pairs of
texts, in-batch negatives, SimCSE or CoSENT; the model directory is also a sentence-transformers folder.

The model it trains is run by `kbert.embeddings.embedder.Embedder` (`kbert embed`, `kbert serve`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

import keras
import numpy as np

from kbert.embeddings.embedder import Embedder
from kbert.embeddings.folders import is_sentence_transformer, read_sentence_transformer
from kbert.embeddings.kinds import DenseOutput
from kbert.embeddings.loading import write_sentence_transformer
from kbert.embeddings.modules import Dense
from kbert.errors import DataError, KbertError
from kbert.io import ModelFolder
from kbert.layers.views import SplitViews, StackViews
from kbert.training.contrastive import CoSENT, InBatchNegatives
from kbert.training.data import LabelMap, check_known_tokens
from kbert.training.metrics import spearman
from kbert.training.pipeline import make_dataset
from kbert.training.text_groups import TextGroup, read_text_groups, shape_of
from kbert.training.task import Task, TrainingData, read_training_file

def loss_for(groups: Sequence[TextGroup], asked: Optional[str], path: str) -> str:
    """The contrastive loss for the data (`asked`, else the one its columns call for), or a `DataError`
    naming the columns each loss needs."""
    found = "cosent" if groups[0].score is not None else "simcse" if len(groups[0].texts) == 1 else "in_batch"
    loss = asked or found
    needs = {"cosent": "text<TAB>text_b<TAB>score", "simcse": "one text a line",
             "in_batch": "text<TAB>positive (and optionally <TAB>hard negative)"}
    if loss != found:
        raise DataError(f"{path}: --loss {loss} reads {needs[loss]}; this file has {shape_of(groups[0])} a row, "
                        f"which is --loss {found}'s")
    return loss


class EmbeddingTask(Task):
    """Sentence embeddings trained contrastively: the backbone pooled (`--pooling`) and scaled to unit length,
    trained with in-batch negatives, SimCSE or CoSENT (`kbert.training.contrastive`); the model directory is
    also a sentence-transformers folder (`Embedder.load`, sentence-transformers, `kbert serve` read it).
    The kept epoch has the best validation score: Spearman's correlation of cosines with the gold scores
    for scored pairs, else how often a query's nearest positive of the validation set is its own
    (recall@1)."""

    name = "embed"
    score_name = "val_score"
    score_label = "validation score (Spearman of cosines for scored pairs, else recall@1)"
    reads_tokenizer_json = True

    def __init__(self, options):
        self.options = options
        self.loss_name, self.views, self.tokenizer, self.backbone, self.train_groups = None, 2, None, None, []
        self.prompts, self.default_prompt_name = {}, None  # the trained folder's, carried into the one written

    @property
    def pooling(self) -> str:
        """`--pooling`, else the checkpoint folder's (`adopt_checkpoint`), else mean."""
        return self.options.pooling or "mean"

    def adopt_checkpoint(self, options, checkpoint_path: Optional[str]):
        """A sentence-transformers folder trains as it embeds: its pooling (unless `--pooling` names another),
        its prompts and default prompt written back. A folder whose pipeline this task cannot train (a `Dense`
        projection, a pooling that leaves the prompt out, a sparse or multi-vector encoder) is refused, naming
        what it holds, rather than trained and written as something else."""
        spec = _sentence_transformer(checkpoint_path)
        if spec is not None:
            self.prompts, self.default_prompt_name = dict(spec.prompts), spec.default_prompt_name
        pooling = options.pooling or (spec.output.trained_pooling if spec is not None else "mean")
        self.options = dataclasses.replace(options, pooling=pooling)
        return self.options

    @classmethod
    def from_options(cls, options) -> "EmbeddingTask":
        return cls(options)

    def read(self, tokenizer, train_path: str, valid_path: Optional[str], num_labels: Optional[int],
             options) -> TrainingData:
        if num_labels:
            raise DataError("--num-labels: an embedding model has no labels; leave it out")
        groups, report = read_training_file(read_text_groups, train_path, options)
        self.train_groups = groups
        self.loss_name = loss_for(groups, options.contrastive_loss, train_path)
        self.views = max(len(groups[0].texts), 2)
        if self.loss_name != "cosent" and len(groups) < 2:
            raise DataError(f"{train_path}: one example; in-batch negatives need at least two")
        self.tokenizer = tokenizer
        train = self._dataset(groups, shuffle=options.shuffle)
        check_known_tokens(train_path, (ids for group in groups[:2000] for ids, _ in
                                        tokenizer.encode_all(list(group.texts), maxlen=options.maxlen)), tokenizer)
        valid, valid_report, valid_groups = None, None, []
        if valid_path:
            valid_groups, valid_report = read_training_file(read_text_groups, valid_path, options)
            if self.loss_name == "simcse" and len(valid_groups[0].texts) == 1:
                raise DataError(f"{valid_path}: one text a line, which validates nothing (each text is nearest to "
                                "itself, so recall@1 is always 1.0); validate SimCSE on pairs, text<TAB>positive "
                                "(recall@1) or text<TAB>text_b<TAB>score (Spearman), as the SimCSE paper does on STS-B")
            if self.loss_name != "simcse" or valid_groups[0].score is None:
                loss_for(valid_groups, self.loss_name if self.loss_name != "simcse" else "in_batch", valid_path)
            valid = self._dataset(valid_groups, shuffle=False)
        return TrainingData(train, valid, LabelMap([]), len(train), str(report),
                            str(valid_report) if valid_report else None,
                            {"loss": self.loss_name, "pooling": self.pooling}, valid_groups)

    def _dataset(self, groups: Sequence[TextGroup], shuffle: bool):
        """Batches of each example's views (SimCSE: a text twice), token and segment ids per view."""
        encoded = []
        for group in groups:
            texts = group.texts * 2 if len(group.texts) == 1 else group.texts
            encoded.append(tuple(ids for pair in self.tokenizer.encode_all(list(texts), maxlen=self.options.maxlen)
                                 for ids in pair))
        scores = np.array([group.score or 0.0 for group in groups], np.float32)
        return make_dataset(encoded, scores, self.options.batch_size, shuffle=shuffle, seed=self.options.seed,
                            pad_ids=(self.tokenizer.pad_id, 0) * self.views)

    def build(self, bert, num_labels: int, options):
        self.backbone = bert
        output = DenseOutput(self.pooling)
        return output.build(bert, output.modules(int(bert.outputs[0].shape[-1]), normalize=True))

    def training_model(self, model):
        inputs = [keras.Input((None,), dtype="int32", name=f"View-{view}-{kind}")
                  for view in range(self.views) for kind in ("Token", "Segment")]
        pad_id = 0 if self.tokenizer is None else self.tokenizer.pad_id  # before `read`: BERT's [PAD]
        tokens = StackViews(pad_id, name="Stack-Tokens")(inputs[0::2])
        segments = StackViews(name="Stack-Segments")(inputs[1::2])
        vectors = SplitViews(self.views, name="Split-Views")(model([tokens, segments]))
        return keras.Model(inputs, vectors, name="contrastive")

    def compile_args(self, model) -> dict:
        temperature = self.options.temperature or 0.05
        loss = (CoSENT(temperature) if self.loss_name == "cosent"
                else InBatchNegatives(temperature, symmetric=self.options.symmetric))
        return {"loss": loss}

    def validation_score(self, model, data: TrainingData):
        if not data.valid_examples:
            return lambda logs: None
        groups = data.valid_examples

        def score(logs: dict) -> float:
            embedder = self.embedder(model, "")
            if groups[0].score is not None:  # CoSENT's pairs, or SimCSE validated on STS-style pairs
                a = embedder.encode([group.texts[0] for group in groups], normalize=True)
                b = embedder.encode([group.texts[1] for group in groups], normalize=True)
                value = spearman((a * b).sum(1), np.array([group.score for group in groups]))
            else:
                value = recall_at_1(embedder, [group.texts[0] for group in groups],
                                    [group.texts[1] for group in groups])
            logs[self.score_name] = value
            return value

        return score

    def embedder(self, model, source: str) -> Embedder:
        """The model being trained as an `Embedder` (`source`: where it is saved, "" while training)."""
        return Embedder(model, self.tokenizer, self.options.maxlen, True, source, self.backbone,
                        DenseOutput(self.pooling), prompts=self.prompts,
                        default_prompt_name=self.default_prompt_name)

    def finish(self, model, directory: str) -> None:
        """The sentence-transformers files beside kbert's: Hugging Face weights and config, the modules (a
        `SparseEncoder`'s for a sparse encoder)."""
        write_sentence_transformer(directory, self.embedder(model, directory))


def _sentence_transformer(checkpoint_path: Optional[str]):
    """The sentence-transformers folder `checkpoint_path` read (`SentenceTransformerSpec`), checked to be one this
    task trains as it is; None where the checkpoint is not such a folder."""
    if not checkpoint_path or not os.path.isdir(checkpoint_path):
        return None
    folder = ModelFolder.of(checkpoint_path)  # its files read once, by both
    if not is_sentence_transformer(folder):
        return None
    spec = read_sentence_transformer(folder)
    modules = ", ".join(type(module).__name__ for module in spec.modules)
    if spec.output.trained_pooling is None or any(isinstance(module, Dense) for module in spec.modules):
        raise KbertError(f"--checkpoint {checkpoint_path}: a sentence-transformers folder of {spec.output.described} "
                         f"with modules {modules} after its transformer; kbert train --task embed trains a "
                         "transformer, its pooling and Normalize, and would write this model without the rest: "
                         "give the transformer's own folder (its config.json and weights) to train a new pooling "
                         "on it")
    if not spec.include_prompt:
        raise KbertError(f"--checkpoint {checkpoint_path}: its pooling leaves the prompt's tokens out "
                         "(include_prompt false), which kbert train --task embed does not train")
    return spec


def recall_at_1(embedder: Embedder, queries: Sequence[str], positives: Sequence[str]) -> float:
    """How often a query's nearest positive, among all of them, is its own: searched as the model's kind searches
    (`OutputKind.search`: cosine, a sparse encoder's dot product, a multi-vector encoder's MaxSim)."""
    blocks, _ = embedder.output.search(embedder, {"query": list(queries), "document": list(positives)})
    nearest = np.concatenate([block.argmax(1) for block in blocks])
    return float(np.mean(nearest == np.arange(len(queries))))
