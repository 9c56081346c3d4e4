"""Converts a weights file between formats: Google checkpoint <-> Hugging Face safetensors.

A conversion builds the kbert model that the source holds (backbone plus the
heads whose weights are present), loads the source into it with all checks,
and writes the other format with its config and vocabulary beside it.
"""

from __future__ import annotations

import os
import shutil
from typing import Optional

from kbert.builder.backbone import build_transformer_model
from kbert.checkpoints.undrawn import undrawn_weights
from kbert.checkpoints.formats import GOOGLE_CONFIG, GOOGLE_PREFIX, HF_CONFIG, VOCAB, find_config, heads_in, open_weights
from kbert.checkpoints.google import save_google_checkpoint
from kbert.checkpoints.hf import save_hf_weights
from kbert.checkpoints.loader import TensorSource, load_into
from kbert.checkpoints.names import check_hf_names
from kbert.errors import CheckpointError
from kbert.io import (atomic_copy, is_occupied, is_within, refuse_replacing_the_working_directory,
                      replace_directory, staging_directory)
from kbert.models.config import BertConfig
from kbert.models.registry import resolve
from kbert.models.tables import GOOGLE, HF


def convert(src: "str | os.PathLike[str]", out: "str | os.PathLike[str]",
            config_path: Optional[str] = None, overwrite: bool = False, model: Optional[str] = None,
            max_shard_size: Optional[int] = None) -> dict:
    """Converts a Google checkpoint to Hugging Face safetensors, or the reverse.

    `model` is the family (default: the config's `model_type`, else BERT).
    `max_shard_size` (bytes): safetensors written as shards of at most that
    size and their index, as transformers writes a large model.
    `out` is a directory, new or empty (or, with `overwrite`, replaced whole);
    it receives the weights, the config in the target format's name, and
    `vocab.txt` when the source has one beside it. The files are written into
    a temporary directory beside `out` and moved there together, so `out`
    never holds a mix of two models. Returns a description of what was written.
    """
    out = os.path.normpath(os.fspath(out))
    for given, name in ((src, "the source"), (config_path, "the config")):
        if given is not None and is_within(os.fspath(given), out):
            raise CheckpointError(f"{out}: holds {name} ({os.fspath(given)}); converting into it would replace "
                                  f"{name} with its own conversion. Choose another output directory")
    refuse_replacing_the_working_directory(out)
    if is_occupied(out) and not overwrite:
        raise CheckpointError(f"{out}: already exists and is not empty; converting into it would mix "
                              "two models' files. Choose a new directory, or pass --overwrite to "
                              "replace it")
    source = open_weights(src)
    family, config = resolve(config_path or find_config(source), model)
    check_hf_names(family, f"{source.path}: converting model={family.name!r}", "Nothing was written")
    if max_shard_size and source.fmt == HF:
        raise CheckpointError(f"{source.path}: --max-shard-size shards Hugging Face safetensors; this conversion "
                              "writes a Google checkpoint (one file per kind). Leave it out")
    heads = heads_in(source, family)
    with undrawn_weights():  # the checkpoint's values are read into it, not random ones replaced
        built = build_transformer_model(config, model=family.name, **heads.flags())
    report = load_into(built, source)
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    staging = staging_directory(out)
    try:
        vocab = os.path.join(os.path.dirname(os.path.abspath(source.path)), VOCAB)
        vocab = vocab if os.path.exists(vocab) else None
        weights, written_config = _write_converted(built, source, config, staging, vocab, max_shard_size)
        if vocab and source.fmt == HF:  # save_hf_weights copies it into an HF directory itself
            atomic_copy(vocab, os.path.join(staging, VOCAB))
        replace_directory(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    weights, written_config = (os.path.join(out, os.path.relpath(path, staging))
                               for path in (weights, written_config))
    return {"source": source.path, "weights": weights, "config": written_config,
            "variables": len(report.loaded), "params": built.count_params(),
            "heads": {flag: bool(value) for flag, value in heads.flags().items()}, "unused": report.describe_unused()}


def _write_converted(model, source: TensorSource, config: BertConfig, out: str, vocab: Optional[str],
                     max_shard_size: Optional[int] = None):
    """Writes the model in the format that `source` is not (with `vocab`'s framing ids in an HF config);
    returns (weights, config) paths."""
    if source.fmt == GOOGLE:
        return save_hf_weights(model, out, vocab, max_shard_size=max_shard_size), os.path.join(out, HF_CONFIG)
    weights = save_google_checkpoint(model, os.path.join(out, GOOGLE_PREFIX))
    written_config = os.path.join(out, GOOGLE_CONFIG)
    config.to_json_file(written_config)
    return weights, written_config
