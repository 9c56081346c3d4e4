"""Each task's own options of `kbert train`, declared beside the tasks, so that a new task's options touch no
command-line module.

`kbert.cli.train` adds every option here to `kbert train` (its help saying which `--task` reads it; the `mlm`
task's to `kbert pretrain`) and passes the values on as `TrainingOptions` fields. Pure Python: `kbert --help` imports no task module.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Tuple

from kbert.models.heads import TOKEN_HEADS
from kbert.training.options import CONTRASTIVE_LOSSES, PACKINGS, POOLINGS, RERANK_LOSSES, WHOLE_WORDS


@dataclasses.dataclass(frozen=True)
class TaskOption:
    """One task option of `kbert train`.

    Args:
        flag: the option (`--pooling`).
        field: the `TrainingOptions` field it sets (its default is that field's).
        tasks: the tasks that read it (named in its help: `--task embed: ...`).
        help: what it does.
        settings: `argparse`'s other settings (`type`, `choices`, `action`, `metavar`); `type` `COUNT`: a whole
            number of 1 or more, checked by the command line.

    Example:
    >>> option = TaskOption("--pooling", "pooling", ("embed",), "how the token vectors become one")
    >>> option.described
    '--task embed: how the token vectors become one'
    """

    flag: str
    field: str
    tasks: Tuple[str, ...]
    help: str
    settings: Dict[str, object] = dataclasses.field(default_factory=dict)

    @property
    def described(self) -> str:
        return f"--task {', '.join(self.tasks)}: {self.help}"


#: An option's `type` that is a whole number of 1 or more (the command line's check of it).
COUNT = "count"


def _option(flag: str, field: str, tasks: Tuple[str, ...], help: str, **settings) -> TaskOption:
    return TaskOption(flag, field, tasks, help, settings)


TASK_OPTIONS = (
    _option("--head", "head", ("ner",), "the tagger's head", choices=TOKEN_HEADS),
    _option("--crf-lr-multiplier", "crf_lr_multiplier", ("ner",),
            "the CRF transitions' learning rate as a multiple of --lr (--head crf)", type=float),
    _option("--pooling", "pooling", ("embed",), "how the token vectors become one", choices=POOLINGS),
    _option("--loss", "contrastive_loss", ("embed",),
            "in_batch (text<TAB>positive[<TAB>negative]), simcse (one text a line) or cosent "
            "(text<TAB>text_b<TAB>score); default: the one the data's columns call for", choices=CONTRASTIVE_LOSSES),
    _option("--temperature", "temperature", ("embed", "sparse", "colbert"),
            "the scores are divided by it: embed's cosines (default 0.05), sparse's dot products and colbert's "
            "MaxSim scores (default 1)", type=float),
    _option("--symmetric", "symmetric", ("embed",), "in_batch: also score each positive against the queries",
            action="store_true"),
    _option("--query-length", "query_length", ("colbert",),
            "a query's tokens, filled with [MASK] up to it and cut at it (default 32)", type=COUNT),
    _option("--teacher", "teacher", ("colbert",),
            "distil a reranker (a CrossEncoder folder, a --task rerank directory): learn its scores of each "
            "query's positive and hard negative (KL divergence)", metavar="RERANKER"),
    _option("--query-regularizer", "query_regularizer", ("sparse",),
            "the weight of SPLADE's FLOPS regularizer on the queries' vectors (reached over the first third of "
            "the steps)", type=float),
    _option("--document-regularizer", "document_regularizer", ("sparse",),
            "the weight of the FLOPS regularizer on the documents' vectors", type=float),
    _option("--inference-free", "inference_free", ("sparse",),
            "only documents go through the model; a query's vector is a fixed table of inverse document "
            "frequencies (written as a sentence-transformers Router)", action="store_true"),
    _option("--query-learning-rate", "query_learning_rate", ("sparse",),
            "with --inference-free: train the queries' table too, at this learning rate (sentence-transformers' "
            "example: 1e-3); default: it stays the IDF table", type=float),
    _option("--rerank-loss", "rerank_loss", ("rerank",),
            "pointwise (each pair's label) or listwise (a softmax over each query's group of --group-size "
            "passages: a relevant one and others of the same query)", choices=RERANK_LOSSES),
    _option("--group-size", "group_size", ("rerank",),
            "--rerank-loss listwise: passages a group (--batch-size counts pairs: a multiple)", type=COUNT),
    _option("--whole-word", "whole_word", ("mlm",), "mask whole words: jieba's (Chinese), wordpiece's (a word and "
            "its ## pieces) or none (each token alone)", choices=WHOLE_WORDS),
    _option("--mask-rate", "mask_rate", ("mlm",),
            "share of the tokens predicted (80 %% [MASK], 10 %% random, 10 %% kept)", type=float),
    _option("--pack", "pack", ("mlm",), "how lines share a row: stream (end to end, a line continuing into the next "
            "row, attention across lines: Google's and bert4keras's data), documents (each line a document: several "
            "a row, positions restarted, attention within it), none (one line a row, padded)", choices=PACKINGS),
)
