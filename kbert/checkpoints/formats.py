"""Which format a weights file is in, which family and heads its names belong to, what it holds.

`load_weights` opens either format by its path; `kbert inspect` lists a
file's tensors with the kbert variable each would feed
(`inspect_weights`); `kbert.builder.convert` builds the model a file holds
from `heads_in` and `find_config`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional

import numpy as np

from kbert.checkpoints.google import open_google_checkpoint
from kbert.checkpoints.hf import INDEX_NAME as SAFETENSORS_INDEX
from kbert.checkpoints.hf import WEIGHTS_NAME as SAFETENSORS
from kbert.checkpoints.hf import open_safetensors
from kbert.checkpoints.loader import LoadReport, TensorSource, load_into
from kbert.checkpoints.names import block_count, family_named_by, known_names, layer_of
from kbert.errors import CheckpointError
from kbert.hub import fetch_checkpoint, is_checkpoint_name, resolve_checkpoint
from kbert.models import naming
from kbert.models.heads import Heads
from kbert.models.registry import get_family
from kbert.models.tables import GOOGLE, HF

GOOGLE_CONFIG, HF_CONFIG, VOCAB = "bert_config.json", "config.json", "vocab.txt"
# A vocabulary beside a checkpoint, in the order kbert prefers: WordPiece's, SentencePiece's (T5),
# a Hugging Face tokenizer.json (its WordPiece vocabulary is read from it), DeBERTa-v3's spm.model.
VOCABULARIES = (VOCAB, "spiece.model", "tokenizer.json", "spm.model")
GOOGLE_PREFIX = "bert_model.ckpt"


def detect_format(path: "str | os.PathLike[str]") -> str:
    """`"hf"` for a safetensors file or a sharded one's index, or a directory holding either, else `"google"`."""
    path = os.fspath(path)
    if path.endswith((".safetensors", SAFETENSORS_INDEX)):
        return HF
    if os.path.isdir(path) and any(os.path.exists(os.path.join(path, name))
                                   for name in (SAFETENSORS, SAFETENSORS_INDEX)):
        return HF
    return GOOGLE


@dataclasses.dataclass(frozen=True)
class CheckpointFiles:
    """A checkpoint's weights and the files beside them (None where absent); `family` is a preset's."""

    weights: str
    config: Optional[str]
    vocab: Optional[str]
    family: Optional[str]


def checkpoint_files(path_or_name: "str | os.PathLike[str]", cache_dir: Optional[str] = None) -> CheckpointFiles:
    """The weights, config and vocabulary of a checkpoint given by path or by name (`kbert.hub`)."""
    family = None
    if is_checkpoint_name(path_or_name):
        fetched = fetch_checkpoint(os.fspath(path_or_name), cache_dir)
        weights, family = fetched.path, fetched.family
    else:
        weights = os.fspath(path_or_name)
    directory = weights if os.path.isdir(weights) else os.path.dirname(os.path.abspath(weights))
    return CheckpointFiles(weights, _beside(directory, (GOOGLE_CONFIG, HF_CONFIG)),
                           _beside(directory, VOCABULARIES), family)


def _beside(directory: str, names) -> Optional[str]:
    return next((os.path.join(directory, name) for name in names
                 if os.path.exists(os.path.join(directory, name))), None)


def open_weights(path: "str | os.PathLike[str]") -> TensorSource:
    """A Google checkpoint or a safetensors file, whichever `path` is (or a name `kbert.hub` fetches)."""
    path = resolve_checkpoint(path)
    if detect_format(path) == HF:
        return open_safetensors(path)
    return open_google_checkpoint(path)


def load_weights(model, path: "str | os.PathLike[str]", keep_tokens=None,
                 ignore_position_table: bool = False, compound_tokens=None) -> LoadReport:
    """Loads a Google checkpoint or Hugging Face safetensors, detected from `path` (or a name, as `hf://...`).

    `keep_tokens` as for `load_google_checkpoint`; `ignore_position_table`
    takes the weights of a family with a position table (BERT) into one
    without (NEZHA, RoFormer), which is otherwise an error; `compound_tokens`
    (bert4keras's) adds vocabulary rows, each the mean of the rows of its ids.
    """
    return load_into(model, open_weights(path), keep_tokens=keep_tokens,
                     ignore_position_table=ignore_position_table, compound_tokens=compound_tokens)


def detect_family(source: TensorSource, model: Optional[str] = None):
    """The family whose names a weights file uses: `model` if given, else recognised from the names.

    ELECTRA, ALBERT, GPT, GPT-2, GPT2-ML, T5 and RoFormer-v2 checkpoints are
    recognised (`kbert.checkpoints.names.family_named_by`); NEZHA and RoFormer
    use BERT's names, so they are read as BERT unless `model` says otherwise;
    Hugging Face's RoBERTa layout (`source.roberta`) as `hf_roberta`.
    """
    return get_family(model or ("hf_roberta" if source.roberta else family_named_by(source.shapes)))


def kbert_paths(source: TensorSource, family=None) -> Dict[str, str]:
    """Tensor name -> the kbert variable it would feed, for every tensor kbert knows."""
    mapping = known_names(source.fmt, block_count(source.shapes), family or detect_family(source))
    return {name: mapping[name] for name in source.shapes if name in mapping}


def heads_in(source: TensorSource, family=None) -> Heads:
    """The heads whose weights are all in `source`."""
    layers = {layer_of(path) for path in kbert_paths(source, family).values()}
    return Heads.from_flags(with_pool=naming.POOLER_DENSE in layers, with_nsp=naming.NSP_PROBA in layers,
                            with_mlm=naming.MLM_DENSE in layers,
                            with_discriminator=naming.DISCRIMINATOR_DENSE in layers)


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
    found = _beside(directory, (GOOGLE_CONFIG, HF_CONFIG))
    if found:
        return found
    raise CheckpointError(f"{directory}: no {GOOGLE_CONFIG} or {HF_CONFIG} beside "
                          f"{os.path.basename(source.path)}; pass the config explicitly")
