"""Training a sparse encoder (SPLADE): `kbert train --task sparse`.

The backbone's masked-LM head gives each token's vocabulary logits; `SpladePooling` keeps
`max log(1 + ReLU)` of them over the text, a weight per vocabulary entry. Training ranks each query's
positive above the batch's other documents by dot product (`InBatchNegatives` unnormalised, temperature 1),
plus SPLADE's FLOPS regularizer on the queries and the documents, each with its own weight, warmed up
quadratically over the first third of the steps (`FlopsRegularization`), as sentence-transformers' `SpladeLoss`
trains. Each epoch logs how many weights a query and a document keep (`query_active_dimensions`,
`document_active_dimensions`). The model directory is a sentence-transformers `SparseEncoder` folder: `kbert embed`,
`kbert serve` (`/embed_sparse`) and sentence-transformers read it.
"""

from __future__ import annotations

import math
from typing import Optional

import keras

from kbert.checkpoints.sentence_transformers import SpladeSpec
from kbert.errors import DataError
from kbert.tasks.embedding import Embedder, EmbeddingTask, embedding_model
from kbert.training.contrastive import (FlopsRegularization, InBatchNegatives, document_active_dimensions,
                                        query_active_dimensions)
from kbert.training.task import TrainingData

#: SPLADE v2's pooling: the maximum over tokens of log(1 + ReLU(logits)).
SPLADE = SpladeSpec("max", "relu")


class SparseEmbeddingTask(EmbeddingTask):
    """SPLADE trained on `query<TAB>positive[<TAB>hard negative]` rows; the kept epoch has the best recall@1 of
    the validation queries among the validation positives, by dot product of their sparse vectors."""

    name = "sparse"
    score_label = "validation recall@1 (dot products of sparse vectors)"

    def backbone_args(self) -> dict:
        return {"with_mlm": "linear"}  # logits: SPLADE activates and pools them itself

    def read(self, tokenizer, train_path: str, valid_path: Optional[str], num_labels: Optional[int],
             options) -> TrainingData:
        if options.contrastive_loss not in (None, "in_batch"):
            raise DataError(f"--loss {options.contrastive_loss}: a sparse encoder trains with SPLADE's in-batch "
                            "ranking loss (query<TAB>positive[<TAB>negative] rows); leave --loss out")
        data = super().read(tokenizer, train_path, valid_path, num_labels, options)
        if self.loss_name != "in_batch":
            raise DataError(f"{train_path}: {self.loss_name}'s rows; a sparse encoder trains on "
                            "query<TAB>positive (optionally <TAB>hard negative) rows")
        data.state = {"loss": "splade", "pooling": str(SPLADE), "query_regularizer": options.query_regularizer,
                      "document_regularizer": options.document_regularizer}
        # SPLADE's (and sentence-transformers') warm-up: the regularizers' full weight a third of the way in
        self.warmup_steps = max(1, math.ceil(data.steps_per_epoch * options.epochs / 3))
        return data

    def build(self, bert, num_labels: int, options):
        self.backbone = bert
        return embedding_model(bert, SPLADE)

    def training_model(self, model):
        contrastive = super().training_model(model)
        regularized = FlopsRegularization(self.options.query_regularizer, self.options.document_regularizer,
                                          getattr(self, "warmup_steps", 0), name="FLOPS")(contrastive.outputs[0])
        return keras.Model(contrastive.inputs, regularized, name="splade")

    def compile_args(self, model) -> dict:
        return {"loss": InBatchNegatives(self.options.temperature or 1.0, normalize=False,
                                         symmetric=self.options.symmetric),
                "metrics": [query_active_dimensions, document_active_dimensions]}

    def embedder(self, model, source: str) -> Embedder:
        return Embedder(model, self.tokenizer, self.options.maxlen, False, source, self.backbone, SPLADE)
