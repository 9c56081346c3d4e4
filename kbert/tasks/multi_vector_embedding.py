"""Training a multi-vector (ColBERT) encoder: `kbert train --task colbert`.

Each token's hidden state is projected to 128 values (no bias) and scaled to unit length, as PyLate's and
sentence-transformers 6's `MultiVectorEncoder` build a ColBERT from a backbone. A query is filled with `[MASK]`
up to `--query-length` tokens (32) that its own tokens do not attend to; a document is cut at `--maxlen` and its
punctuation is left out of the scoring. Training ranks each query's positive above the batch's other documents
(and its hard negative, where the rows have one) by MaxSim, cross-entropy at temperature 1 (`MaxSimScores`,
`InBatchScores`: PyLate's contrastive loss). With `--teacher`, a reranker (a CrossEncoder folder, kbert's own
`--task rerank` directory) scores each row's (query, document) pairs once, and the model learns the teacher's
distribution over each query's documents instead (`ScoreDistillation`, KL divergence: PyLate's distillation).
The kept epoch has the best validation recall@1 by MaxSim; the model
directory is a sentence-transformers `MultiVectorEncoder` folder: `kbert embed`, `kbert evaluate`, `kbert serve`
(`/embed_all`) and sentence-transformers read it.
"""

from __future__ import annotations

import string
from typing import Optional, Sequence

import keras
import numpy as np

from kbert.errors import DataError
from kbert.layers.pooling import L2Normalize
from kbert.layers.views import StackViews
from kbert.embeddings.embedder import Embedder
from kbert.embeddings.multi_vector import MultiVectorOutput, QueryExpansion, role_tokens, scored_mask, skiplist_ids
from kbert.tasks.embedding import EmbeddingTask
from kbert.training.text_groups import TextGroup
from kbert.training.contrastive import InBatchScores, MaxSimScores, ScoreDistillation
from kbert.training.pipeline import make_dataset
from kbert.training.task import Task, TrainingData

#: The width of each token's vector (PyLate's and sentence-transformers' default projection).
DIMENSIONS = 128


class MultiVectorEmbeddingTask(EmbeddingTask):
    """ColBERT trained on `query<TAB>positive[<TAB>hard negative]` rows; the kept epoch has the best recall@1 of
    the validation queries among the validation positives, by MaxSim."""

    name = "colbert"
    score_label = "validation recall@1 (MaxSim)"

    adopt_checkpoint = Task.adopt_checkpoint  # a dense model's pooling and prompts are not this task's

    def check_lengths(self, options, config, config_path: str) -> None:
        if options.query_length > config.longest_input:
            raise DataError(f"--query-length {options.query_length}: a query expanded to it is longer than the "
                            f"model's longest input, {config.longest_input} tokens ({config_path})")

    def read(self, tokenizer, train_path: str, valid_path: Optional[str], num_labels: Optional[int],
             options) -> TrainingData:
        if options.contrastive_loss not in (None, "in_batch"):
            raise DataError(f"--loss {options.contrastive_loss}: a multi-vector encoder trains with in-batch "
                            "negatives by MaxSim (query<TAB>positive[<TAB>negative] rows); leave --loss out")
        if options.symmetric:
            raise DataError("--symmetric: MaxSim scores a query against a document, not the other way; leave it out")
        self.spec = MultiVectorOutput(document_length=options.maxlen,
                                      expansion=QueryExpansion("fixed", options.query_length),
                                      skiplist_words=tuple(string.punctuation))
        data = super().read(tokenizer, train_path, valid_path, num_labels, options)
        if self.loss_name != "in_batch":
            raise DataError(f"{train_path}: {self.loss_name}'s rows; a multi-vector encoder trains on "
                            "query<TAB>positive (optionally <TAB>hard negative) rows")
        data.state = {"loss": "distillation" if options.teacher else "maxsim", "pooling": str(self.spec),
                      "query_length": options.query_length, **({"teacher": options.teacher} if options.teacher else {})}
        return data

    def _dataset(self, groups: Sequence[TextGroup], shuffle: bool):
        """Batches of each example's views: a query's tokens (expanded), then each document's, each view's token
        ids, segment ids and scoring mask (the skiplist's tokens and the padding 0)."""
        views = [[group.texts[view] for group in groups] for view in range(self.views)]
        encoded = [role_tokens(self.spec, self.tokenizer, texts, "query" if view == 0 else "document",
                               self.options.maxlen) for view, texts in enumerate(views)]
        skipped = {role: skiplist_ids(self.spec, self.tokenizer, role) for role in ("query", "document")}
        features = []
        for example in zip(*encoded):
            row = []
            for view, (ids, segments) in enumerate(example):
                scored = scored_mask(ids, skipped["query" if view == 0 else "document"])
                row += [ids, segments, scored.astype(np.int32).tolist()]
            features.append(tuple(row))
        return make_dataset(features, self._teacher_logits(groups), self.options.batch_size, shuffle=shuffle,
                            seed=self.options.seed, pad_ids=(self.tokenizer.pad_id, 0, 0) * self.views)

    def _teacher_logits(self, groups: Sequence[TextGroup]) -> np.ndarray:
        """The labels of the examples: the teacher's logit of each (query, document) pair `[examples, documents]`;
        without a teacher, zeros (in-batch negatives read none)."""
        if not self.options.teacher:
            return np.zeros(len(groups), np.float32)
        if self.views < 3:
            raise DataError("--teacher: distillation learns the teacher's ranking of each query's documents; give "
                            "each query a positive and a hard negative (query<TAB>positive<TAB>negative)")
        from kbert.tasks.reranking import Reranker

        teacher = Reranker.load(self.options.teacher)
        queries = [group.texts[0] for group in groups for _ in group.texts[1:]]
        documents = [text for group in groups for text in group.texts[1:]]
        return teacher.logits(queries, documents, self.options.batch_size).reshape(len(groups), -1).astype(np.float32)

    def build(self, bert, num_labels: int, options):
        self.backbone = bert
        tokens = self.spec.build(bert)  # its own inputs: a graph traced anew where expansion is hidden
        vectors = keras.layers.Dense(DIMENSIONS, use_bias=False, name="Embedding-Dense-0")(tokens.outputs[0])
        return keras.Model(tokens.inputs, L2Normalize(name="Embedding-Normalize")(vectors), name="embedder")

    def training_model(self, model):
        inputs = [keras.Input((None,), dtype="int32", name=f"View-{view}-{kind}")
                  for view in range(self.views) for kind in ("Token", "Segment", "Scored")]
        tokens = StackViews(self.tokenizer.pad_id, name="Stack-Tokens")(inputs[0::3])
        segments = StackViews(name="Stack-Segments")(inputs[1::3])
        scored = StackViews(name="Stack-Scored")(inputs[2::3])
        scores = MaxSimScores(self.views, name="MaxSim")(model([tokens, segments]), scored)
        return keras.Model(inputs, scores, name="colbert")

    def compile_args(self, model) -> dict:
        temperature = self.options.temperature or 1.0
        return {"loss": ScoreDistillation(temperature) if self.options.teacher else InBatchScores(temperature)}

    def embedder(self, model, source: str) -> Embedder:
        return Embedder(model, self.tokenizer, self.options.maxlen, True, source, self.backbone, self.spec)
