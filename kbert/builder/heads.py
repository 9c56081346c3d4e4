"""The task heads of the bert4keras tutorials, on a backbone from `build_transformer_model`.

`build_classifier` puts a softmax on `[CLS]` (or the pooled output);
`build_token_classifier` puts a tagger's head on every token: softmax, CRF or
GlobalPointer.
"""

from __future__ import annotations

from typing import Optional

import keras

from kbert.errors import check_whole_number
from kbert.layers import ConditionalRandomField, GlobalPointer, TakePositions, TakeToken
from kbert.models import naming
from kbert.models.heads import DEFAULT_TOKEN_HEAD, TOKEN_HEADS
from kbert.models.registry import get_family, graph_class
from kbert.models.transformer import id_model, initializer_of


def build_classifier(bert: keras.Model, num_labels: int, *, name: str = "classifier") -> keras.Model:
    """Adds the classification head of the bert4keras tutorials to a backbone.

    On a backbone whose output is the sequence output, the head is `CLS-token`
    (the `[CLS]` hidden state) then `dense_output` (Dense, softmax). On one
    built `with_pool=True`, `dense_output` reads the pooled output.

    Args:
        bert: a model from `build_transformer_model`.
        num_labels: number of classes.
        name: the classifier's name.

    Example:
    >>> from kbert import build_transformer_model
    >>> bert = build_transformer_model("configs/bert_base_chinese.json")
    >>> build_classifier(bert, num_labels=2).count_params()
    101678594
    """
    check_whole_number(num_labels, "num_labels", error=ValueError)
    features = bert.output
    if isinstance(features, (list, tuple)):
        raise ValueError("build_classifier expects a backbone with one output (no MLM/NSP heads)")
    if len(features.shape) == 3:
        features = TakeToken(0, name=naming.CLS_TOKEN)(features)
    # float32 even under a mixed-precision policy: a stable softmax and loss.
    probabilities = keras.layers.Dense(
        num_labels, activation="softmax", kernel_initializer=initializer_of(bert),
        name=naming.CLASSIFIER_DENSE, dtype="float32")(features)
    return id_model(bert.inputs, probabilities, getattr(bert, "family", "bert"), name)


def build_masked_lm(bert: keras.Model, max_predictions: Optional[int] = None, *, packed: bool = False,
                    name: str = "masked_lm") -> keras.Model:
    """The backbone's MLM (or LM) head on given positions only: the model pre-training and seq2seq train.

    The model takes one more input, `Input-Masked-Positions` (`[batch,
    max_predictions]`), and gives the head's output there: `[batch,
    max_predictions, vocab]`. It is the backbone's own graph run again on
    its own layers (shared weights), with `MLM-Positions` (`TakePositions`)
    between the last block and the head, so the vocabulary-wide projection
    is computed for the positions that have a label only (Google's
    `gather_indexes`): the masked tokens of pre-training, the target
    tokens of a UniLM or LM. Saving `bert` saves what was trained, head
    included; `bert` itself still gives the head at every position.

    Args:
        bert: a model from `build_transformer_model(..., with_mlm=...)` with no
            other head; `application` `"encoder"`, `"lm"` or `"unilm"`.
        max_predictions: positions per row (None: any number, batch by batch).
        packed: rows hold several documents (packed pre-training): the model
            takes `Input-Position` too, each token's position within its
            document (0 where one starts), which restarts the positions and
            keeps each token's attention within its document
            (`Attention-Packed-Mask`), so a document gives what it gives
            alone in a row. For an `"encoder"` of a family with bert4keras's
            attention masks (those with `unilm`).
        name: the model's name.

    Example:
    >>> from kbert import build_transformer_model
    >>> bert = build_transformer_model("configs/bert_tiny.json", with_mlm="linear")
    >>> model = build_masked_lm(bert, max_predictions=3)
    >>> model.output.shape, model.count_params() == bert.count_params()
    ((None, 3, 21128), True)
    """
    if max_predictions is not None:
        check_whole_number(max_predictions, "max_predictions", error=ValueError)
    spec = getattr(bert, "build_spec", None)
    if spec is None or not spec["heads"]["mlm"] or spec["heads"]["pool"] or spec.get("layer_norm_cond"):
        raise ValueError("build_masked_lm needs a model from build_transformer_model(..., with_mlm=True or "
                         "'linear') with no other head")
    family = get_family(bert.family)
    graph = graph_class(family).from_model(bert, family)
    if packed:
        if "unilm" not in family.applications or graph.application != "encoder":
            raise ValueError(f"packed: rows of several documents need an encoder of a family with attention masks "
                             f"(bert, roberta, albert, nezha, roformer, roformer_v2), not model={family.name!r} "
                             f"with application={graph.application!r}")
        graph.application = "packed"
    graph.inputs = graph.get_inputs()
    positions = keras.Input((max_predictions,), dtype="int32", name=naming.INPUT_MASKED_POSITIONS)
    x = graph.apply_embeddings(graph.inputs)
    for index in family.block_indices(graph.config):
        x = graph.apply_main_layers(x, index)
    x = TakePositions(name=naming.MLM_POSITIONS)([x, positions])
    return id_model([*graph.inputs, positions], graph.apply_final_layers(x), family.name, name)


def build_token_classifier(bert: keras.Model, num_labels: int, *, head: str = DEFAULT_TOKEN_HEAD, head_size: int = 64,
                           crf_lr_multiplier: float = 1, name: str = "token_classifier") -> keras.Model:
    """Adds a sequence-labelling head to a backbone's sequence output.

    Heads (`TOKEN_HEADS`), with bert4keras's recipes:
    - `"softmax"`: `dense_output`, a softmax over `num_labels` tags per token;
    - `"crf"`: `dense_emissions` then `CRF` (`ConditionalRandomField`); train
      with `model.get_layer("CRF").sparse_loss`, decode with `viterbi_decode`;
    - `"global_pointer"`: `global_pointer`, span scores `[batch, num_labels, n, n]`
      (`num_labels` entity types); train with `kbert.training.losses.global_pointer_crossentropy`.

    Args:
        bert: a backbone from `build_transformer_model` (sequence output, no heads).
        num_labels: tags (softmax, crf) or entity types (global_pointer).
        head: one of `TOKEN_HEADS`.
        head_size: GlobalPointer's query/key width.
        crf_lr_multiplier: the CRF transitions' learning-rate multiplier.
        name: the model's name.

    Example:
    >>> from kbert import build_transformer_model
    >>> bert = build_transformer_model("configs/bert_tiny.json")
    >>> tagger = build_token_classifier(bert, 7, head="crf")
    >>> [layer.name for layer in tagger.layers[-2:]], tagger.output.shape
    (['dense_emissions', 'CRF'], (None, None, 7))
    """
    check_whole_number(num_labels, "num_labels", error=ValueError)
    if head not in TOKEN_HEADS:
        raise ValueError(f"head: expected one of {', '.join(TOKEN_HEADS)}, got {head!r}")
    features = bert.output
    if isinstance(features, (list, tuple)) or len(features.shape) != 3:
        raise ValueError("build_token_classifier needs a backbone whose output is the sequence output "
                         "(built without with_pool, with_nsp or with_mlm)")
    initializer = initializer_of(bert)
    if head == "softmax":
        # float32 even under a mixed-precision policy: a stable softmax and loss.
        outputs = keras.layers.Dense(num_labels, activation="softmax", kernel_initializer=initializer,
                                     name=naming.CLASSIFIER_DENSE, dtype="float32")(features)
    elif head == "crf":
        emissions = keras.layers.Dense(num_labels, kernel_initializer=initializer, name=naming.EMISSIONS_DENSE)(features)
        outputs = ConditionalRandomField(lr_multiplier=crf_lr_multiplier, name=naming.CRF)(emissions)
    else:
        outputs = GlobalPointer(num_labels, head_size, kernel_initializer=initializer,
                                name=naming.GLOBAL_POINTER)(features)
    return id_model(bert.inputs, outputs, getattr(bert, "family", "bert"), name)
