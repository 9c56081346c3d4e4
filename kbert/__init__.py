"""kbert: build, load, inspect and fine-tune BERT-family models in Keras 3, bert4keras-compatible.

The public API is re-exported here. Names are imported on first use, so that
`import kbert` (and `kbert params`) does not load TensorFlow until a model is
built.

The package is laid out in wings, each importing only the wings before it:
`errors`, `io`, `tokenizers` <- `layers` <- `models` <- `checkpoints` <-
`builder` <- `analysis`, `generation` <- `training` <- `embeddings` <- `tasks` <- `serving` <-
`compat` (bert4keras's module layout) <- `cli`
(`tests/test_layout.py` keeps it so).

Example:
>>> import kbert
>>> bert = kbert.build_transformer_model("configs/bert_base_chinese.json")
>>> kbert.build_classifier(bert, num_labels=2).count_params()
101678594
"""

import importlib

__version__ = "0.2.0"

_EXPORTS = {
    "BertConfig": "kbert.models.config",
    "bundled_config_path": "kbert.models.config",
    "load_config": "kbert.models.registry",
    "build_transformer_model": "kbert.builder",
    "build_classifier": "kbert.builder",
    "build_token_classifier": "kbert.builder",
    "build_masked_lm": "kbert.builder",
    "Transformer": "kbert.builder",
    "convert": "kbert.builder.convert",
    "load_keras_model": "kbert.training.saving",
    "analyze": "kbert.analysis.params",
    "explain_claim": "kbert.analysis.params",
    "flops_per_token": "kbert.analysis.params",
    "crosscheck": "kbert.analysis.summary",
    "format_table": "kbert.analysis.summary",
    "keras2_summary": "kbert.analysis.keras2",
    "load_google_checkpoint": "kbert.checkpoints.google",
    "save_google_checkpoint": "kbert.checkpoints.google",
    "load_hf_weights": "kbert.checkpoints.hf",
    "save_hf_weights": "kbert.checkpoints.hf",
    "load_weights": "kbert.checkpoints.formats",
    "ViterbiDecoder": "kbert.layers.crf",
    "generate": "kbert.generation.engines",
    "AutoRegressiveDecoder": "kbert.generation.decoder",
    "Tokenizer": "kbert.tokenizers.wordpiece",
    "SpTokenizer": "kbert.tokenizers.sentence_piece",
    "load_vocab": "kbert.tokenizers.vocab",
    "save_vocab": "kbert.tokenizers.vocab",
    "sequence_padding": "kbert.training.batches",
    "DataGenerator": "kbert.training.batches",
    "PiecewiseLinear": "kbert.training.schedules",
    "WarmupLinearDecay": "kbert.training.schedules",
    "WarmupConstant": "kbert.training.schedules",
    "extend_with_piecewise_linear_lr": "kbert.training.schedules",
    "TrainingOptions": "kbert.training.options",
    "train": "kbert.tasks",
    "Embedder": "kbert.embeddings.embedder",
    "pretrain": "kbert.tasks",
    "adversarial_training": "kbert.training.adversarial",
    "gradient_penalty": "kbert.training.adversarial",
    "KbertError": "kbert.errors",
    "ConfigError": "kbert.errors",
    "CheckpointError": "kbert.errors",
    "DataError": "kbert.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kbert' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
