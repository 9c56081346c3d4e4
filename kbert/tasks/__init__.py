"""Tasks trained on the models: their data, their heads, how they are trained, scored and used.

- `classification`: a label per text (the default task); predict, evaluate, export.
- `labelling`: tagged files, tag schemes, spans, entity scores.
- `ner`: the tagger: units and WordPiece chunks, CRF/softmax/GlobalPointer heads, decoding.
- `seq2seq`: UniLM fine-tuning on source/target pairs; generation, exact match and character F1.
- `pretraining`: masked-language-model pre-training on plain text, whole-word masking (`pretrain`).
- `embedding`: sentence embeddings trained contrastively (`--task embed`), run by `kbert.embeddings`' `Embedder`.
- `sparse_embedding`: SPLADE sparse encoders trained with the FLOPS regularizer (`--task sparse`).
- `multi_vector_embedding`: multi-vector (ColBERT) encoders trained by MaxSim (`--task colbert`).
- `reranking`: cross-encoders (`Reranker`): a relevance score per query-passage pair (`--task rerank`).
- `predictors`: any model directory loaded for prediction (what `kbert predict` and `kbert serve` share).
- `arguments`: each task's own options of `kbert train`.

Each task is a `kbert.training.task.Task`; the training run
(`kbert.training.loop.train_task`) receives it and never imports a task.
"""

from __future__ import annotations

import importlib
from typing import Optional, Type

from kbert.errors import KbertError
from kbert.training.options import TrainingOptions

# `--task` name -> "module:class" (imported when used, so `kbert --help` needs no TensorFlow).
TASK_CLASSES = {
    "classify": "kbert.tasks.classification:ClassificationTask",
    "ner": "kbert.tasks.ner:NerTask",
    "seq2seq": "kbert.tasks.seq2seq:Seq2SeqTask",
    "mlm": "kbert.tasks.pretraining:MaskedLanguageModelTask",
    "embed": "kbert.tasks.embedding:EmbeddingTask",
    "sparse": "kbert.tasks.sparse_embedding:SparseEmbeddingTask",
    "colbert": "kbert.tasks.multi_vector_embedding:MultiVectorEmbeddingTask",
    "rerank": "kbert.tasks.reranking:RerankTask",
}
TASKS = tuple(TASK_CLASSES)


def get_task_class(name: str) -> Type:
    """The `Task` class of a `--task` name."""
    if name not in TASK_CLASSES:
        raise KbertError(f"unknown task {name!r}; expected one of {', '.join(TASKS)}")
    module, attribute = TASK_CLASSES[name].split(":")
    return getattr(importlib.import_module(module), attribute)


def get_task(options: TrainingOptions):
    """The `Task` for `options.task` (and `options.head`)."""
    return get_task_class(options.task).from_options(options)


def train(config_path: str, vocab_path: str, train_path: str, out_dir: str, *,
          options: Optional[TrainingOptions] = None, **kwargs) -> dict:
    """Fine-tunes a model for `options.task` (default: classify) and writes a model directory.

    The arguments are `kbert.training.loop.train_task`'s after the task:
    `valid_path`, `checkpoint_path`, `num_labels`, `resume`, `overwrite`,
    `verbose`. Returns training.json's content.
    """
    from kbert.training.loop import train_task

    options = options or TrainingOptions()
    return train_task(get_task_class(options.task), config_path, vocab_path, train_path, out_dir,
                      options=options, **kwargs)


def pretrain(config_path: str, vocab_path: str, text_path: str, out_dir: str, *,
             options: Optional[TrainingOptions] = None, **kwargs) -> dict:
    """Pre-trains an encoder's MLM on plain text (`kbert.tasks.pretraining`) and writes a model directory.

    The directory holds `bert_config.json`, `vocab.txt` and `bert_model.ckpt`
    (the backbone and its MLM head, under the family's checkpoint names),
    which `build_transformer_model` and `kbert train --checkpoint` read.

    Args:
        config_path, vocab_path: the encoder's config and vocabulary.
        text_path: a text file (a document or sentence a line) or a directory of them.
        out_dir: the model directory to write.
        options: `TrainingOptions` (default: `TrainingOptions.for_pretraining()`);
            `task` is set to `mlm`. `whole_word`, `mask_rate` and `optimizer`
            choose the masking and the optimizer.
        **kwargs: `kbert.training.loop.train_task`'s: `valid_path` (held-out
            text: its masked-token accuracy picks the kept epoch),
            `checkpoint_path` (continue pre-training from it), `resume`,
            `overwrite`, `verbose`.

    Returns:
        training.json's content.
    """
    import dataclasses

    options = dataclasses.replace(options or TrainingOptions.for_pretraining(), task="mlm")
    return train(config_path, vocab_path, text_path, out_dir, options=options, **kwargs)
