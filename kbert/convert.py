"""Between formats: detect a weights file's format, inspect it, convert Google ↔ Hugging Face.

A conversion builds the kbert model that the source holds (backbone plus the
heads whose weights are present), loads the source into it with all checks,
and writes the other format with its config and vocabulary beside it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from typing import Dict, List, Optional

import numpy as np

from kbert import naming
from kbert.config import BertConfig
from kbert.errors import CheckpointError
from kbert.io import atomic_copy, atomic_write_text, is_occupied, replace_directory
from kbert.loader import LoadReport, TensorSource, load_into
from kbert.weights import GOOGLE, HF, block_count, check_hf_names, family_named_by, known_names, layer_of

GOOGLE_CONFIG, HF_CONFIG, VOCAB = "bert_config.json", "config.json", "vocab.txt"
GOOGLE_PREFIX = "bert_model.ckpt"


def detect_format(path: "str | os.PathLike[str]") -> str:
    """`"hf"` for a safetensors file or a directory holding one, else `"google"`."""
    path = os.fspath(path)
    if path.endswith(".safetensors"):
        return HF
    if os.path.isdir(path) and os.path.exists(os.path.join(path, "model.safetensors")):
        return HF
    return GOOGLE


def open_weights(path: "str | os.PathLike[str]") -> TensorSource:
    """A Google checkpoint or a safetensors file, whichever `path` is."""
    if detect_format(path) == HF:
        from kbert.hf import open_safetensors

        return open_safetensors(path)
    from kbert.checkpoint import open_google_checkpoint

    return open_google_checkpoint(path)


def load_weights(model, path: "str | os.PathLike[str]", keep_tokens=None) -> LoadReport:
    """Loads a Google checkpoint or Hugging Face safetensors, detected from `path`."""
    return load_into(model, open_weights(path), keep_tokens=keep_tokens)


@dataclasses.dataclass(frozen=True)
class Heads:
    """Which heads a weights file holds."""

    with_pool: bool
    with_nsp: bool
    with_mlm: bool
    with_discriminator: bool = False


def detect_family(source: TensorSource, model: Optional[str] = None):
    """The family whose names a weights file uses: `model` if given, else recognised from the names.

    ELECTRA (`electra/…`) and ALBERT (`…/transformer/group_0/…`) have names of
    their own; NEZHA and RoFormer use BERT's, so they are read as BERT unless
    `model` says otherwise.
    """
    from kbert.models.registry import get_family

    return get_family(model or family_named_by(source.shapes))


def kbert_paths(source: TensorSource, family=None) -> Dict[str, str]:
    """Tensor name -> the kbert variable it would feed, for every tensor kbert knows."""
    mapping = known_names(source.fmt, block_count(source.shapes), family or detect_family(source))
    return {name: mapping[name] for name in source.shapes if name in mapping}


def heads_in(source: TensorSource, family=None) -> Heads:
    """The heads whose weights are all in `source`."""
    layers = {layer_of(path) for path in kbert_paths(source, family).values()}
    return Heads(naming.POOLER_DENSE in layers, naming.NSP_PROBA in layers,
                 naming.MLM_DENSE in layers, naming.DISCRIMINATOR_DENSE in layers)


@dataclasses.dataclass(frozen=True)
class WeightsVariable:
    """One tensor of a weights file, for `kbert inspect`."""

    name: str
    shape: tuple
    dtype: str
    kbert_path: Optional[str]  # the kbert variable it feeds; None if unused

    @property
    def size(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1


def inspect_weights(source: TensorSource, family=None) -> List[WeightsVariable]:
    """Every tensor of a checkpoint or safetensors file, with the kbert variable it feeds (as `family` reads it)."""
    paths = kbert_paths(source, family)
    return [WeightsVariable(name, source.shapes[name], source.dtypes[name], paths.get(name))
            for name in sorted(source.shapes)]


def find_config(source: TensorSource) -> str:
    """The config file beside a weights file (`bert_config.json` or `config.json`)."""
    directory = os.path.dirname(os.path.abspath(source.path))
    for name in (GOOGLE_CONFIG, HF_CONFIG):
        candidate = os.path.join(directory, name)
        if os.path.exists(candidate):
            return candidate
    raise CheckpointError(f"{directory}: no {GOOGLE_CONFIG} or {HF_CONFIG} beside "
                          f"{os.path.basename(source.path)}; pass the config explicitly")


def convert(src: "str | os.PathLike[str]", out: "str | os.PathLike[str]",
            config_path: Optional[str] = None, overwrite: bool = False, model: Optional[str] = None) -> dict:
    """Converts a Google checkpoint to Hugging Face safetensors, or the reverse.

    `model` is the family (default: the config's `model_type`, else BERT).
    `out` is a directory, new or empty (or, with `overwrite`, replaced whole);
    it receives the weights, the config in the target format's name, and
    `vocab.txt` when the source has one beside it. The files are written into
    a temporary directory beside `out` and moved there together, so `out`
    never holds a mix of two models. Returns a description of what was written.
    """
    from kbert.builder import build_transformer_model

    out = os.path.normpath(os.fspath(out))
    if is_occupied(out) and not overwrite:
        raise CheckpointError(f"{out}: already exists and is not empty; converting into it would mix "
                              "two models' files. Choose a new directory, or pass --overwrite to "
                              "replace it")
    from kbert.models.registry import resolve

    source = open_weights(src)
    family, config = resolve(config_path or find_config(source), model)
    check_hf_names(family, f"{source.path}: converting model={family.name!r}", "Nothing was written")
    heads = heads_in(source, family)
    built = build_transformer_model(config, model=family.name, **dataclasses.asdict(heads))
    report = load_into(built, source)
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(out)}.tmp-")
    try:
        weights, written_config = _write_converted(built, source, config, heads, staging)
        vocab = os.path.join(os.path.dirname(os.path.abspath(source.path)), VOCAB)
        if os.path.exists(vocab):
            atomic_copy(vocab, os.path.join(staging, VOCAB))
        replace_directory(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    weights, written_config = (os.path.join(out, os.path.relpath(path, staging))
                               for path in (weights, written_config))
    return {"source": source.path, "weights": weights, "config": written_config,
            "variables": len(report.loaded), "params": built.count_params(),
            "heads": dataclasses.asdict(heads), "unused": report.describe_unused()}


def _write_converted(model, source: TensorSource, config: BertConfig, heads: Heads, out: str):
    """Writes the model in the format that `source` is not; returns (weights, config) paths."""
    if source.fmt == GOOGLE:
        from kbert.hf import save_hf_weights

        weights = save_hf_weights(model, out)
        architecture = "BertForPreTraining" if heads.with_mlm or heads.with_nsp else "BertModel"
        written_config = os.path.join(out, HF_CONFIG)
        atomic_write_text(written_config, json.dumps(
            {**config.to_dict(), "model_type": "bert", "architectures": [architecture]},
            indent=2, sort_keys=True) + "\n")
        return weights, written_config
    from kbert.checkpoint import save_google_checkpoint

    weights = save_google_checkpoint(model, os.path.join(out, GOOGLE_PREFIX))
    written_config = os.path.join(out, GOOGLE_CONFIG)
    config.to_json_file(written_config)
    return weights, written_config
