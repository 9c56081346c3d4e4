"""`TrainingOptions`: the hyper-parameters of `kbert train`.

Pure Python, so that the command line can show the defaults in `--help`
without importing TensorFlow.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional

from kbert.models.heads import DEFAULT_TOKEN_HEAD

ADVERSARIAL = ("fgm", "gp")  # --adversarial methods (kbert.training.adversarial)
OPTIMIZERS = ("adamw", "lamb", "adafactor")
SCHEDULES = ("linear", "constant")  # after the warm-up: decay to 0 at the last step, or hold the peak
WHOLE_WORDS = ("jieba", "wordpiece", "none")  # pre-training's word boundaries (kbert.tasks.pretraining)
# kbert pretrain's rows: lines end to end (Google's and bert4keras's), documents apart several to a row, or one a row
PACKINGS = ("stream", "documents", "none")
CONTRASTIVE_LOSSES = ("in_batch", "simcse", "cosent")  # --task embed (kbert.training.contrastive)
RERANK_LOSSES = ("pointwise", "listwise")  # --task rerank (kbert.tasks.reranking)
POOLINGS = ("mean", "cls", "max", "mean_sqrt_len", "weightedmean", "lasttoken")  # kbert.layers.pooling's modes


@dataclasses.dataclass
class TrainingOptions:
    """Hyper-parameters of `train`.

    Args:
        epochs: passes over the training data.
        batch_size: global batch size (split across devices).
        learning_rate: peak learning rate, reached after warm-up.
        warmup_ratio: share of all steps spent warming up.
        schedule: after the warm-up, `linear` decay to 0 at the last step, or
            `constant` (the peak to the end; with `optimizer="adafactor"`,
            T5's own schedule: Keras's Adafactor caps the rate at 1/sqrt(step)).
        weight_decay: AdamW's decoupled weight decay (not on LayerNorms, biases).
        maxlen: longest sequence, in tokens, `[CLS]` and `[SEP]` included.
        do_lower_case: lower-case and strip accents in the tokenizer.
        strategy: `auto` (all local GPUs if several), `mirrored`, `multiworker`.
        mixed_precision: None, `bf16` or `fp16`.
        skip_malformed: skip bad data rows (counted) instead of failing.
        shuffle: reshuffle the training data every epoch. The order follows
            `seed`, but under a distribution strategy Keras draws the
            reshuffles differently, so runs compare exactly only without it.
        bucketing: batch training examples of similar length together (16-token
            bands, drawn in shuffled order): less padding, faster epochs.
        seed: seed of initialisation, shuffling and dropout.
        model_parallel: split each attention and feed-forward kernel (and the token table) over this
            many devices, Megatron-style, on JAX (`keras.distribution.ModelParallel`; the devices left over
            form the batch axis). 1: every device holds the whole model.
        remat: the feed-forward layers recompute their intermediate values in the backward pass instead
            of keeping them (Keras's `RematScope`, gradient checkpointing): less memory, a slower step.
        ema: keep an exponential moving average of the weights (Keras's
            `use_ema`, momentum 0.99) and, at the end of every epoch, continue
            from it; so validation, the kept epoch and the saved weights are
            the average's (bert4keras's `extend_with_exponential_moving_average`).
        task: `classify` (a label per text), `ner` (entities in tagged text),
            `seq2seq` (a target text per source text: UniLM, or T5 with `model`)
            or `mlm` (masked-language-model pre-training on plain text: `kbert.pretrain`).
        model: the family, by bert4keras's `model=` names (default: the
            config's `model_type`, else BERT); `t5`, `t5.1.1` or `mt5.1.1`
            train T5's encoder-decoder for `seq2seq`.
        head: the tagger's head for `ner`: `crf`, `softmax` or `global_pointer`.
        crf_lr_multiplier: the CRF transitions' learning rate, as a multiple
            of `learning_rate` (bert4keras's `lr_multiplier`): the transitions
            start from nothing even when the backbone is pre-trained.
        grad_accum: apply the averaged gradients of this many batches at once
            (Keras's `gradient_accumulation_steps`; bert4keras's
            `extend_with_gradient_accumulation`): an effective batch of
            `batch_size * grad_accum`.
        adversarial: train against perturbations of the token embeddings:
            `"fgm"` (bert4keras's `adversarial_training`: each step on the
            table moved by epsilon along its gradient) or `"gp"` (the
            gradient penalty: loss + ½·epsilon·‖∂loss/∂embeddings‖²); None: off.
        adversarial_epsilon: the perturbation's norm (FGM) or the penalty's
            weight (gp); bert4keras's examples use 0.5 and 1.
        optimizer: `adamw`; `lamb` (Keras's `Lamb`: AdamW's step scaled per
            weight by its norm; for large pre-training batches); or `adafactor`
            (Keras's `Adafactor`, T5's own: no momentum, each step relative to
            the weight's scale; for T5 from random weights).
        whole_word: pre-training (`task="mlm"`) masks whole words: `jieba`'s
            (Chinese words, as bert4keras's `pretraining/`; other text splits at
            spaces and punctuation), `wordpiece`'s (a word and its `##` pieces),
            or `none` (each token alone).
        mask_rate: pre-training predicts this share of the tokens.
        pack: pre-training's rows (`PACKINGS`): `stream` lays the lines end
            to end, a line continuing into the next row, attention across
            them (Google's and bert4keras's pre-training data); `documents`
            keeps each line a document of its own, several to a row, with
            positions restarted and attention within it; `none`, one
            document a row, padded.
        lora_rank: train rank-`lora_rank` LoRA adapters on the transformer
            blocks' kernels instead of the whole model (`kbert.training.lora`);
            None: full fine-tuning.
        lora_alpha: LoRA's scale numerator (the adapters are scaled by
            `lora_alpha / lora_rank`; default: `lora_rank`, a scale of 1).
        lora_embeddings: with `lora_rank`, the rank of a LoRA adapter on the
            token embedding table (scaled by `lora_alpha / lora_embeddings`);
            None: the table stays frozen.
        jit_compile: compile the training step with XLA on TensorFlow, where
            Keras leaves it uncompiled on a machine without a GPU (JAX's step
            is always compiled; PyTorch's is refused). Faster steps (a UniLM
            step 1.2x, docs/performance.md) for a compilation per batch shape,
            which bucketing keeps to a few; False: Keras's choice.
        pooling: `task="embed"`: how token vectors become one (`kbert.layers.pooling.Pooling`); None: the
            checkpoint's own where it is a sentence-transformers folder (Qwen3-Embedding's lasttoken), else mean.
        contrastive_loss: `task="embed"`: `in_batch` (a text and its positive, optionally a hard
            negative), `simcse` (one text a line, itself its positive) or `cosent` (pairs with a
            similarity score); None: the one the data's columns call for.
        temperature: `task="embed"`: the cosines are divided by it (None: 0.05, a scale of 20); `task="sparse"`:
            the dot products (None: 1, SPLADE's); `task="colbert"`: the MaxSim scores (None: 1, PyLate's).
        symmetric: `task="embed"`, `in_batch`: also score each positive against the queries.
        query_regularizer, document_regularizer: `task="sparse"`: the weights of SPLADE's FLOPS regularizer on
            the queries' and the documents' vectors (sentence-transformers' defaults), reached over the first
            third of the steps (quadratically, as SPLADE warms them up).
        inference_free: `task="sparse"`: only documents go through the model; a query's vector is a fixed table
            of each vocabulary entry's inverse document frequency over the training documents (an inference-free
            encoder, written as a sentence-transformers `Router` folder).
        query_learning_rate: `inference_free`: the table learns too, at this rate (its own: sentence-transformers'
            example trains it at 1e-3 beside the model's 2e-5); None: it stays the inverse document frequencies.
        query_length: `task="colbert"`: a query's tokens, filled with `[MASK]` up to it (ColBERT's query
            expansion) and cut at it.
        teacher: `task="colbert"`: a reranker (a CrossEncoder folder) whose logits of each row's (query,
            document) pairs the model's MaxSim scores learn (KL divergence); None: in-batch negatives.
        rerank_loss: `task="rerank"`: `pointwise` (binary cross-entropy of each pair's logit) or
            `listwise` (softmax cross-entropy over each query's group of `group_size` passages,
            the relevant one and others of the same query; `kbert.training.contrastive.ListwiseSoftmaxLoss`).
        group_size: `rerank_loss="listwise"`: passages a group; `batch_size` counts pairs, a multiple of it.
        columns: `{field: column}` for data files whose columns (or JSON keys)
            have other names, e.g. `{"text": "review", "label": "sentiment"}`
            (`kbert.training.records`).
    """

    epochs: int = 3
    batch_size: int = 32
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    schedule: str = "linear"
    weight_decay: float = 0.01
    maxlen: int = 128
    do_lower_case: bool = True
    strategy: str = "auto"
    mixed_precision: Optional[str] = None
    skip_malformed: bool = False
    shuffle: bool = True
    bucketing: bool = True
    seed: int = 0
    ema: bool = False
    remat: bool = False
    model_parallel: int = 1
    grad_accum: int = 1
    task: str = "classify"
    model: Optional[str] = None
    head: str = DEFAULT_TOKEN_HEAD
    crf_lr_multiplier: float = 100.0
    adversarial: Optional[str] = None
    adversarial_epsilon: float = 0.5
    optimizer: str = "adamw"
    whole_word: str = "jieba"
    mask_rate: float = 0.15
    pack: str = "stream"
    columns: Optional[Dict[str, str]] = None
    lora_rank: Optional[int] = None
    lora_alpha: Optional[float] = None
    lora_embeddings: Optional[int] = None
    jit_compile: bool = False
    pooling: Optional[str] = None
    contrastive_loss: Optional[str] = None
    temperature: Optional[float] = None
    rerank_loss: str = "pointwise"
    group_size: int = 4
    symmetric: bool = False
    query_regularizer: float = 5e-5
    document_regularizer: float = 3e-5
    inference_free: bool = False
    query_learning_rate: Optional[float] = None
    query_length: int = 32
    teacher: Optional[str] = None

    @classmethod
    def for_pretraining(cls, **changes) -> "TrainingOptions":
        """Options of `task="mlm"` with pre-training's defaults (learning from scratch: a larger learning
        rate and batch, a shorter warm-up), then `changes`.

        >>> options = TrainingOptions.for_pretraining(epochs=1)
        >>> options.task, options.learning_rate, options.epochs
        ('mlm', 0.0005, 1)
        """
        return cls(**{"task": "mlm", "epochs": 2, "batch_size": 64, "learning_rate": 5e-4, "warmup_ratio": 0.05,
                      **changes})
