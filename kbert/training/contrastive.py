"""The losses sentence embeddings are trained with, on the vectors of each example's texts.

A contrastive model's output is `[batch, views, dimensions]`: the vectors of
an example's texts side by side (`kbert.layers.views.SplitViews`).

- `InBatchNegatives` (InfoNCE, sentence-transformers' MultipleNegativesRankingLoss):
  view 0 is the query; its positive is view 1 of its own example, and every
  other example's views 1.. (and its own hard negative, view 2, where the
  data has one) are its negatives. Cross-entropy over cosine similarities
  divided by a temperature. `symmetric` adds the same loss from each positive
  to the queries. Unsupervised SimCSE is this loss on a text and itself:
  dropout makes the two vectors differ.
- `CoSENT`: for pairs scored by similarity, every two pairs whose gold
  scores are ordered should have cosines ordered the same way:
  `log(1 + Σ_{s_i > s_j} exp((cos_j − cos_i) / temperature))`.
- `ListwiseSoftmaxLoss`: a reranker's listwise loss, each query's passages
  against each other (softmax cross-entropy over the group's logits).
- `FlopsRegularization`: SPLADE's sparsity term on a sparse encoder's views
  (the ranking loss is `InBatchNegatives` on dot products, `normalize=False`),
  and `active_dimensions`, the sparsity it reaches.
- `MaxSimScores` and `InBatchScores`: a multi-vector (ColBERT) encoder's: each
  query's MaxSim score with every document of the batch (a layer, on the token
  vectors of each view), then the same cross-entropy as `InBatchNegatives` on
  those scores (PyLate's contrastive loss); `ScoreDistillation`: the KL
  divergence of a teacher's (a reranker's) scores of each query's own
  documents from the model's (PyLate's distillation loss).
"""

from __future__ import annotations

import keras
from keras import ops


def _unit(vectors):
    return vectors / ops.maximum(ops.norm(vectors, axis=-1, keepdims=True), 1e-12)


@keras.saving.register_keras_serializable(package="kbert")
class InBatchNegatives(keras.losses.Loss):
    """Cross-entropy of each query against its positive, with the batch's other texts as negatives.

    Args:
        temperature: the cosines are divided by it (0.05: sentence-transformers' scale of 20).
        symmetric: also score each positive against every query (CLIP's two-way loss).
        normalize: score by cosines; False: by dot products (a sparse encoder's, SPLADE's ranking loss with
            temperature 1, sentence-transformers' `SparseMultipleNegativesRankingLoss`).

    `y_true` is not read (the positives are known by position); `y_pred` is
    `[batch, views, dimensions]` with views 2 or more.

    Example:
    >>> import numpy as np
    >>> aligned = np.eye(4, 8, dtype="float32")[:, None].repeat(2, axis=1)  # each positive is its query
    >>> float(InBatchNegatives(temperature=0.05)(np.zeros(4), aligned)) < 1e-6
    True
    """

    def __init__(self, temperature: float = 0.05, symmetric: bool = False, normalize: bool = True,
                 name: str = "in_batch_negatives", **kwargs):
        super().__init__(name=name, **kwargs)
        self.temperature, self.symmetric, self.normalize = temperature, symmetric, normalize

    def call(self, y_true, y_pred):
        vectors = ops.cast(y_pred, "float32")
        vectors = _unit(vectors) if self.normalize else vectors
        queries = vectors[:, 0]
        # Every document of the batch: the positives (view 1) first, then any hard negatives (views 2..).
        documents = ops.reshape(ops.transpose(vectors[:, 1:], (1, 0, 2)), (-1, ops.shape(vectors)[-1]))
        loss = _in_batch_cross_entropy(ops.matmul(queries, ops.transpose(documents)), self.temperature)
        if self.symmetric:
            backward = _in_batch_cross_entropy(ops.matmul(vectors[:, 1], ops.transpose(queries)), self.temperature)
            loss = (loss + backward) / 2
        return loss

    def get_config(self) -> dict:
        return {**super().get_config(), "temperature": self.temperature, "symmetric": self.symmetric,
                "normalize": self.normalize}


def _in_batch_cross_entropy(scores, temperature: float):
    """Cross-entropy of each row of `[batch, documents]` scores (divided by `temperature`) against column `row`,
    the query's own positive."""
    targets = ops.arange(ops.shape(scores)[0])
    return keras.losses.sparse_categorical_crossentropy(targets, scores / temperature, from_logits=True)


@keras.saving.register_keras_serializable(package="kbert")
class InBatchScores(keras.losses.Loss):
    """`InBatchNegatives` on scores a model computed itself: `y_pred` is `[batch, documents]`, each query's score
    with every document of the batch, its positive in column `row` (a multi-vector encoder's MaxSim,
    `MaxSimScores`); `y_true` is not read.

    Args:
        temperature: the scores are divided by it (1: PyLate's and sentence-transformers' for MaxSim, a sum over
            the query's tokens).

    Example:
    >>> import numpy as np
    >>> float(InBatchScores()(np.zeros(2), np.array([[30.0, 2.0], [1.0, 28.0]]))) < 1e-6
    True
    """

    def __init__(self, temperature: float = 1.0, name: str = "in_batch_scores", **kwargs):
        super().__init__(name=name, **kwargs)
        self.temperature = temperature

    def call(self, y_true, y_pred):
        return _in_batch_cross_entropy(ops.cast(y_pred, "float32"), self.temperature)

    def get_config(self) -> dict:
        return {**super().get_config(), "temperature": self.temperature}


@keras.saving.register_keras_serializable(package="kbert")
class ScoreDistillation(keras.losses.Loss):
    """KL divergence of a teacher's distribution over each query's own documents from the model's: the softmax of
    the teacher's scores (`y_true`, `[batch, documents of a query]`: its positive, then its hard negatives) against
    the softmax of the model's scores of the same documents, read from `y_pred` (`[batch, documents of a query ×
    batch]`, as `MaxSimScores` gives them: document `k` of query `i` in column `k × batch + i`).

    Args:
        temperature: the model's scores are divided by it.

    Example:
    >>> import numpy as np
    >>> teacher = np.array([[2.0, 0.0], [1.0, 1.0]])
    >>> agreeing = np.array([[2.0, 7.0, 0.0, 7.0], [7.0, 1.0, 7.0, 1.0]])  # other queries' columns are not read
    >>> float(ScoreDistillation()(teacher, agreeing)) < 1e-6
    True
    """

    def __init__(self, temperature: float = 1.0, name: str = "score_distillation", **kwargs):
        super().__init__(name=name, **kwargs)
        self.temperature = temperature

    def call(self, y_true, y_pred):
        teacher = ops.log_softmax(ops.cast(y_true, "float32"), axis=-1)
        scores = ops.cast(y_pred, "float32")
        batch, documents = ops.shape(scores)[0], ops.shape(y_true)[-1]
        own = ops.arange(documents)[None, :] * batch + ops.arange(batch)[:, None]  # [batch, documents] columns
        student = ops.log_softmax(ops.take_along_axis(scores, own, axis=1) / self.temperature, axis=-1)
        return ops.sum(ops.exp(teacher) * (teacher - student), axis=-1)

    def get_config(self) -> dict:
        return {**super().get_config(), "temperature": self.temperature}


@keras.saving.register_keras_serializable(package="kbert")
class MaxSimScores(keras.layers.Layer):
    """ColBERT's late interaction in a batch: each query's MaxSim score with every document of the batch.

    Called on the token vectors of every view stacked (`[views × batch, tokens, dims]`, as `StackViews` stacks
    the texts: the queries first, then the positives, then any hard negatives) and each token's scoring mask
    (`[views × batch, tokens]`: 1 for a token that counts, 0 for padding and skipped tokens). A query's score
    with a document sums, over the query's scored tokens, the largest dot product with the document's scored
    tokens. Gives `[batch, (views - 1) × batch]`: query `i`'s positive is column `i`.

    Args:
        views: the texts of each example (a query, its positive, and its hard negatives).

    Example:
    >>> import numpy as np
    >>> vectors = np.array([[[1, 0]], [[0, 1]], [[1, 0]], [[0, 1]]], "float32")  # 2 queries, their positives
    >>> ops.convert_to_numpy(MaxSimScores(2)(vectors, np.ones((4, 1), "float32"))).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """

    def __init__(self, views: int = 2, **kwargs):
        super().__init__(**kwargs)
        self.views = views
        self.supports_masking = True  # the padding is in `scored`; the scores carry no mask

    def compute_mask(self, inputs, mask=None):
        return None

    def call(self, vectors, scored):
        vectors, scored = ops.cast(vectors, "float32"), ops.cast(scored, "float32")
        batch = ops.shape(vectors)[0] // self.views
        queries, documents = vectors[:batch], vectors[batch:]
        products = ops.einsum("qid,njd->qinj", queries, documents)  # [batch, query tokens, documents, tokens]
        products = products + (scored[batch:][None, None] - 1.0) * 1e9  # an unscored token never is the best
        best = ops.max(products, axis=-1)
        return ops.sum(best * scored[:batch][:, :, None], axis=1)

    def compute_output_spec(self, vectors, scored):
        batch = None if vectors.shape[0] is None else vectors.shape[0] // self.views
        documents = None if batch is None else batch * (self.views - 1)
        return keras.KerasTensor((batch, documents), dtype="float32")

    def get_config(self) -> dict:
        return {**super().get_config(), "views": self.views}


@keras.saving.register_keras_serializable(package="kbert")
class CoSENT(keras.losses.Loss):
    """CoSENT (Su Jianlin's cosine sentence loss): pairs' cosines ranked as their gold scores are.

    Args:
        temperature: the cosine differences are divided by it (0.05: CoSENT's scale of 20).

    `y_true` holds each pair's gold score `[batch]`; `y_pred` is `[batch, 2, dimensions]`.
    The loss is of the whole batch (a ranking), given to every pair alike.

    Example:
    >>> import numpy as np
    >>> pairs = np.array([[[1, 0], [1, 0]], [[1, 0], [0, 1]]], "float32")  # cosines 1 and 0
    >>> ranked, reversed_ = CoSENT()(np.array([5.0, 1.0]), pairs), CoSENT()(np.array([1.0, 5.0]), pairs)
    >>> float(ranked) < 1e-6 < 19 < float(reversed_)
    True
    """

    def __init__(self, temperature: float = 0.05, name: str = "cosent", **kwargs):
        super().__init__(name=name, **kwargs)
        self.temperature = temperature

    def call(self, y_true, y_pred):
        vectors = _unit(ops.cast(y_pred, "float32"))
        cosines = ops.sum(vectors[:, 0] * vectors[:, 1], axis=-1) / self.temperature
        scores = ops.reshape(ops.cast(y_true, "float32"), (-1,))
        # Entry (i, j): cos_j - cos_i, counted where pair i should rank above pair j.
        differences = cosines[None, :] - cosines[:, None]
        ordered = scores[:, None] > scores[None, :]
        differences = ops.where(ordered, differences, -1e12)
        flat = ops.concatenate([ops.zeros((1,)), ops.reshape(differences, (-1,))], axis=0)
        loss = ops.logsumexp(flat)
        return ops.ones_like(cosines) * loss

    def get_config(self) -> dict:
        return {**super().get_config(), "temperature": self.temperature}


@keras.saving.register_keras_serializable(package="kbert")
class ListwiseSoftmaxLoss(keras.losses.Loss):
    """Listwise ranking loss: softmax cross-entropy over each query's group of passages.

    The batch holds whole groups of `group_size` consecutive pairs (one
    query's passages); `y_pred` is each pair's relevance logit, `y_true` its
    label (0 to 1). Within a group the labels, scaled to sum to 1, are the
    target distribution of the softmax of the logits (ListNet's top-one
    loss; with one relevant passage, its cross-entropy against the rest).
    One loss value a group.

    Args:
        group_size: pairs a group.

    Example:
    >>> loss = ListwiseSoftmaxLoss(group_size=2)
    >>> round(float(loss(ops.convert_to_tensor([[1.], [0.]]), ops.convert_to_tensor([[2.], [0.]]))), 4)
    0.1269
    """

    def __init__(self, group_size: int, name: str = "listwise_softmax", **kwargs):
        super().__init__(name=name, **kwargs)
        self.group_size = group_size

    def call(self, y_true, y_pred):
        logits = ops.reshape(ops.cast(y_pred, "float32"), (-1, self.group_size))
        labels = ops.reshape(ops.cast(y_true, "float32"), (-1, self.group_size))
        target = labels / ops.maximum(ops.sum(labels, axis=-1, keepdims=True), 1e-12)
        return -ops.sum(target * ops.log_softmax(logits, axis=-1), axis=-1)

    def get_config(self):
        return {**super().get_config(), "group_size": self.group_size}


@keras.saving.register_keras_serializable(package="kbert")
class FlopsRegularization(keras.layers.Layer):
    """SPLADE's FLOPS regularizer on a sparse encoder's views, added to the loss while training; the views pass
    through unchanged.

    FLOPS is `Σ_j (mean_i w_ij)²`: the squared mean weight of each vocabulary entry over the batch, which is
    what an inverted index's cost grows with. The queries (view 0) and the documents (views 1.., positives and
    hard negatives together) are regularized apart, with their own weights, as sentence-transformers'
    `SpladeLoss` does; both rise as `(step / warmup_steps)²` to their full value (SPLADE's warm-up).

    Args:
        query_weight: the weight of the queries' FLOPS (sentence-transformers' default 5e-5).
        document_weight: the weight of the documents' FLOPS (3e-5).
        warmup_steps: training steps to full weight (0: full from the first).

    Example:
    >>> import numpy as np
    >>> views = np.array([[[1.0, 0.0], [0.0, 2.0]], [[3.0, 0.0], [0.0, 0.0]]], "float32")
    >>> layer = FlopsRegularization(query_weight=1.0, document_weight=0.5)
    >>> _ = layer(views, training=True)
    >>> round(float(layer.losses[0]), 4)  # queries: (1+3)/2 squared = 4; documents: 0.5 * (2/2)² = 0.5
    4.5
    """

    def __init__(self, query_weight: float = 5e-5, document_weight: float = 3e-5, warmup_steps: int = 0,
                 **kwargs):
        super().__init__(**kwargs)
        self.query_weight, self.document_weight, self.warmup_steps = query_weight, document_weight, warmup_steps

    def build(self, input_shape):
        # the steps taken: a variable, so that every backend's compiled step counts them
        self.step = self.add_weight(shape=(), initializer="zeros", trainable=False, name="step")

    def call(self, inputs, training=False):
        if training:
            self.step.assign(self.step + 1.0)
            vectors = ops.cast(inputs, "float32")
            documents = ops.reshape(vectors[:, 1:], (-1, ops.shape(vectors)[-1]))
            penalty = self.query_weight * _flops(vectors[:, 0]) + self.document_weight * _flops(documents)
            if self.warmup_steps:
                penalty = penalty * ops.square(ops.minimum(self.step / self.warmup_steps, 1.0))
            self.add_loss(penalty)
        return inputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "query_weight": self.query_weight, "document_weight": self.document_weight,
                "warmup_steps": self.warmup_steps}


def _flops(vectors):
    return ops.sum(ops.square(ops.mean(vectors, axis=0)))


def query_active_dimensions(y_true, y_pred):
    """The queries' (view 0's) non-zero weights a vector, the batch's mean: a sparse encoder's sparsity."""
    return ops.mean(ops.sum(ops.cast(y_pred[:, 0] > 0, "float32"), axis=-1))


def document_active_dimensions(y_true, y_pred):
    """The documents' (views 1..'s) non-zero weights a vector, the batch's mean."""
    return ops.mean(ops.sum(ops.cast(y_pred[:, 1:] > 0, "float32"), axis=-1))
