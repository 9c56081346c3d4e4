"""Training a sparse encoder (SPLADE): `kbert train --task sparse`.

The backbone's masked-LM head gives each token's vocabulary logits; `SpladePooling` keeps
`max log(1 + ReLU)` of them over the text, a weight per vocabulary entry. Training ranks each query's
positive above the batch's other documents by dot product (`InBatchNegatives` unnormalised, temperature 1),
plus SPLADE's FLOPS regularizer on the queries and the documents, each with its own weight, warmed up
quadratically over the first third of the steps (`FlopsRegularization`), as sentence-transformers' `SpladeLoss`
trains. Each epoch logs how many weights a query and a document keep (`query_active_dimensions`,
`document_active_dimensions`). The model directory is a sentence-transformers `SparseEncoder` folder: `kbert embed`,
`kbert serve` (`/embed_sparse`) and sentence-transformers read it.

With `inference_free` (`--inference-free`), only the documents go through the model: a query's vector is a
fixed weight table's (`kbert.layers.TermWeights`), each vocabulary entry's BM25 inverse document frequency over
the training documents, as opensearch's inference-free models weigh their queries; the model learns documents
that those weights find. With `query_learning_rate` (`--query-learning-rate`) the table learns too, from those
weights, at its own rate (a multiple of the model's: `learning_rate_multipliers`), as sentence-transformers'
inference-free example trains its `SparseStaticEmbedding`; the special tokens' entries stay 0. The directory is
then a `Router` folder (its query route the table, `frozen` as it was trained), as sentence-transformers writes
one.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import keras
import numpy as np

from kbert.errors import DataError
from kbert.layers.pooling import TermWeights
from kbert.layers.views import SplitViews, StackViews
from kbert.embeddings.embedder import Embedder
from kbert.embeddings.inference_free import StaticQuery
from kbert.embeddings.sparse import SparseOutput
from kbert.tasks.embedding import EmbeddingTask
from kbert.training.contrastive import (FlopsRegularization, InBatchNegatives, document_active_dimensions,
                                        query_active_dimensions)
from kbert.training.task import Task, TrainingData

#: SPLADE v2's pooling: the maximum over tokens of log(1 + ReLU(logits)).
SPLADE = SparseOutput("max", "relu")


class SparseEmbeddingTask(EmbeddingTask):
    """SPLADE trained on `query<TAB>positive[<TAB>hard negative]` rows; the kept epoch has the best recall@1 of
    the validation queries among the validation positives, by dot product of their sparse vectors."""

    name = "sparse"
    score_label = "validation recall@1 (dot products of sparse vectors)"

    adopt_checkpoint = Task.adopt_checkpoint  # a dense model's pooling and prompts are not this task's

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
                      "document_regularizer": options.document_regularizer,
                      **({"inference_free": True, "query_learning_rate": options.query_learning_rate}
                         if options.inference_free else {})}
        if options.inference_free:  # the distinct ids of each training document, for the queries' weights
            self.documents = [set(ids) for ids, _ in tokenizer.ids_and_offsets(
                sorted({text for group in self.train_groups for text in group.texts[1:]}))]
            self.query_table = None  # counted from these documents when first asked for
        # SPLADE's (and sentence-transformers') warm-up: the regularizers' full weight a third of the way in
        self.warmup_steps = max(1, math.ceil(data.steps_per_epoch * options.epochs / 3))
        return data

    def build(self, bert, num_labels: int, options):
        self.backbone = bert
        return SPLADE.build(bert)

    def training_model(self, model):
        if self.options.inference_free:
            inputs, vectors = self._inference_free_views(model)
        else:
            contrastive = super().training_model(model)
            inputs, vectors = contrastive.inputs, contrastive.outputs[0]
        regularized = FlopsRegularization(self.options.query_regularizer, self.options.document_regularizer,
                                          getattr(self, "warmup_steps", 0), name="FLOPS")(vectors)
        return keras.Model(inputs, regularized, name="splade")

    def _inference_free_views(self, model):
        """The views' vectors `[batch, views, V]`: the queries' (view 0) from the weight table (frozen unless it
        has a learning rate of its own), the documents' from the model."""
        vocab_size = int(model.outputs[0].shape[-1])
        inputs = [keras.Input((None,), dtype="int32", name=f"View-{view}-{kind}")
                  for view in range(self.views) for kind in ("Token", "Segment")]
        table = TermWeights(vocab_size, self._special_ids(), trainable=self._table_learns(),
                            name="Query-Term-Weights")
        queries = keras.layers.Reshape((1, vocab_size), name="Query-View")(table(inputs[0]))
        tokens = StackViews(self.tokenizer.pad_id, name="Stack-Tokens")(inputs[2::2])
        segments = StackViews(name="Stack-Segments")(inputs[3::2])
        documents = SplitViews(self.views - 1, name="Split-Views")(model([tokens, segments]))
        table.set_weights([self.query_weights(vocab_size)])
        self.query_table_layer = table
        return inputs, keras.layers.Concatenate(axis=1, name="Views")([queries, documents])

    def _table_learns(self) -> bool:
        return self.options.inference_free and self.options.query_learning_rate is not None

    def learning_rate_multipliers(self, trained) -> dict:
        """The query table's rate as a multiple of the model's (the schedule's warm-up and decay apply to both)."""
        if not self._table_learns():
            return {}
        return {self.query_table_layer.weight.path: self.options.query_learning_rate / self.options.learning_rate}

    def _special_ids(self) -> tuple:
        tokenizer = self.tokenizer
        return tuple(index for index in (tokenizer.pad_token_id, tokenizer.cls_id, tokenizer.sep_id)
                     if index is not None)

    def query_weights(self, vocab_size: int) -> np.ndarray:
        """The queries' weight table: each entry's inverse document frequency over the training documents
        (`inverse_document_frequencies`), the padding and special tokens 0. Counted once: the training model and
        each epoch's validation embedder read the same table."""
        table = getattr(self, "query_table", None)
        if table is None or table.shape[0] != vocab_size:
            table = inverse_document_frequencies(getattr(self, "documents", []), vocab_size)
            table[list(self._special_ids())] = 0.0
            self.query_table = table
        return table

    def compile_args(self, model) -> dict:
        return {"loss": InBatchNegatives(self.options.temperature or 1.0, normalize=False,
                                         symmetric=self.options.symmetric),
                "metrics": [query_active_dimensions, document_active_dimensions]}

    def embedder(self, model, source: str) -> Embedder:
        static = None
        if self.options.inference_free:  # the table's queries, as the training read them (and, learning, left it)
            table = keras.ops.convert_to_numpy(self.query_table_layer.weight) if self._table_learns() else \
                self.query_weights(int(model.outputs[0].shape[-1]))
            static = StaticQuery(np.asarray(table, np.float32), self.tokenizer, self.options.maxlen - 2,
                                 frozen=not self._table_learns())
        return Embedder(model, self.tokenizer, self.options.maxlen, False, source, self.backbone, SPLADE,
                        static_query=static)


def inverse_document_frequencies(documents: Sequence[set], vocab_size: int) -> np.ndarray:
    """Each vocabulary entry's BM25 inverse document frequency, `ln(1 + (N - df + 0.5) / (df + 0.5))` (Lucene's),
    over `documents` (each the set of its token ids): float32 `[vocab_size]`, largest for an id no document holds.

    >>> [round(float(weight), 4) for weight in inverse_document_frequencies([{1, 2}, {2}], 4)]  # ln 6, ln 2, ...
    [1.7918, 0.6931, 0.1823, 1.7918]
    """
    frequencies = np.zeros(vocab_size, np.float64)
    for ids in documents:
        frequencies[[index for index in ids if 0 <= index < vocab_size]] += 1
    return np.log1p((len(documents) - frequencies + 0.5) / (frequencies + 0.5)).astype(np.float32)
