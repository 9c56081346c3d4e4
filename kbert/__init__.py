"""kbert: build, load, inspect and fine-tune BERT in Keras 3, bert4keras-compatible.

The public API is re-exported here. Names are imported on first use, so that
`import kbert` (and `kbert params`) does not load TensorFlow until a model is
built.

Example:
>>> import kbert
>>> bert = kbert.build_transformer_model("configs/bert_base_chinese.json")
>>> kbert.build_classifier(bert, num_labels=2).count_params()
101678594
"""

import importlib

__version__ = "0.1.1"

_EXPORTS = {
    "BertConfig": "kbert.config",
    "load_config": "kbert.config",
    "bundled_config_path": "kbert.config",
    "build_transformer_model": "kbert.builder",
    "build_classifier": "kbert.builder",
    "build_token_classifier": "kbert.builder",
    "load_keras_model": "kbert.builder",
    "analyze": "kbert.params",
    "explain_claim": "kbert.params",
    "flops_per_token": "kbert.params",
    "crosscheck": "kbert.summary",
    "format_table": "kbert.summary",
    "load_google_checkpoint": "kbert.checkpoint",
    "save_google_checkpoint": "kbert.checkpoint",
    "load_hf_weights": "kbert.hf",
    "save_hf_weights": "kbert.hf",
    "load_weights": "kbert.convert",
    "Transformer": "kbert.builder",
    "ViterbiDecoder": "kbert.layers.crf",
    "generate": "kbert.generation.generate",
    "AutoRegressiveDecoder": "kbert.generation.decoder",
    "Tokenizer": "kbert.tokenizer",
    "load_vocab": "kbert.vocab",
    "save_vocab": "kbert.vocab",
    "sequence_padding": "kbert.batches",
    "DataGenerator": "kbert.batches",
    "PiecewiseLinear": "kbert.schedules",
    "WarmupLinearDecay": "kbert.schedules",
    "extend_with_piecewise_linear_lr": "kbert.schedules",
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
