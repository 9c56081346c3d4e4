"""Google BERT checkpoints (`bert_model.ckpt`): load, save and inspect.

Reading goes through TensorFlow's own checkpoint reader
(`tf.train.load_checkpoint`); writing through `SaveV2`, which produces the
same name-based TF1 layout as Google's releases (`bert/embeddings/...`,
`cls/predictions/...`). Names come from the weight table in `kbert.weights`.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import tempfile
from typing import List, Optional, Sequence

import numpy as np

from kbert.errors import CheckpointError, first_line
from kbert.loader import LoadReport, TensorSource, load_into
from kbert.weights import GOOGLE, block_count, known_names, weight_names

_SUFFIXES = (".index", ".meta")
_DATA_MARK = ".data-"


def resolve_checkpoint_prefix(path: "str | os.PathLike[str]") -> str:
    """The checkpoint prefix for any of the forms users pass.

    Accepts the prefix (`.../bert_model.ckpt`), any one of its files (`.index`,
    `.data-00000-of-00001`, `.meta`), or a directory holding one checkpoint or
    a `checkpoint` state file.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        return _prefix_in_directory(path)
    if path.endswith(_SUFFIXES):
        path = path.rsplit(".", 1)[0]
    elif _DATA_MARK in os.path.basename(path):
        path = path[: path.rindex(_DATA_MARK)]
    if not os.path.exists(path + ".index"):
        raise CheckpointError(
            f"{path}: no checkpoint here (expected {os.path.basename(path)}.index beside it); "
            "pass the prefix, e.g. .../bert_model.ckpt, one of its files, or its directory")
    return path


def _prefix_in_directory(directory: str) -> str:
    state = os.path.join(directory, "checkpoint")
    if os.path.exists(state):
        import tensorflow as tf

        latest = tf.train.latest_checkpoint(directory)
        if latest and os.path.exists(latest + ".index"):
            return latest
    indexes = sorted(glob.glob(os.path.join(directory, "*.index")))
    if len(indexes) == 1:
        return indexes[0][: -len(".index")]
    if not indexes:
        raise CheckpointError(f"{directory}: no checkpoint in this directory (no *.index file)")
    raise CheckpointError(
        f"{directory}: {len(indexes)} checkpoints in this directory "
        f"({', '.join(os.path.basename(p)[:-6] for p in indexes)}): pass one prefix")


def open_google_checkpoint(path: "str | os.PathLike[str]") -> TensorSource:
    """The variables of a Google checkpoint, read lazily with TensorFlow's reader."""
    import tensorflow as tf

    prefix = resolve_checkpoint_prefix(path)
    try:
        reader = tf.train.load_checkpoint(prefix)
        shapes = {name: tuple(shape) for name, shape in reader.get_variable_to_shape_map().items()}
        dtypes = {name: dtype.name for name, dtype in reader.get_variable_to_dtype_map().items()}
    except (tf.errors.OpError, ValueError) as error:
        raise CheckpointError(f"{prefix}: not a readable TensorFlow checkpoint "
                              f"({first_line(error)})") from None
    return TensorSource(prefix, GOOGLE, shapes, dtypes, reader.get_tensor)


def load_google_checkpoint(
    model, path: "str | os.PathLike[str]", keep_tokens: Optional[Sequence[int]] = None
) -> LoadReport:
    """Loads a Google BERT checkpoint into a kbert model, all or nothing.

    Args:
        model: a model from `build_transformer_model` (or `build_classifier`).
        path: the checkpoint prefix, one of its files, or its directory.
        keep_tokens: checkpoint vocabulary ids to keep, in order (bert4keras's
            `keep_tokens`), for a model built with a smaller `vocab_size`.

    Returns:
        A `LoadReport`: the variables loaded, those the model did not use
        (optimizer slots, `global_step`, heads not built), and adjustments.

    Raises:
        CheckpointError: naming every missing variable, every shape mismatch
            (with the config key that is probably wrong), or the unreadable
            file. The model's weights are then unchanged.

    Example:
    >>> bert = build_transformer_model("chinese_L-12_H-768_A-12/bert_config.json")
    >>> report = load_google_checkpoint(bert, "chinese_L-12_H-768_A-12/bert_model.ckpt")
    """
    return load_into(model, open_google_checkpoint(path), keep_tokens=keep_tokens)


def save_google_checkpoint(model, path: "str | os.PathLike[str]") -> str:
    """Writes the model's weights as a Google checkpoint at prefix `path`.

    The variables get Google's names and layouts (e.g. NSP's `output_weights`
    transposed to `[2, H]`), so Google's code, bert4keras and kbert all read
    it. A `checkpoint` state file is written beside it. The write is atomic:
    on any failure an existing checkpoint at `path` is untouched.

    Returns the prefix written.
    """
    import tensorflow as tf

    prefix = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(prefix)
    os.makedirs(directory, exist_ok=True)
    variables = {variable.path: variable for variable in model.weights}
    names, tensors = [], []
    for row in weight_names(model):
        value = variables[row.path].numpy()
        names.append(row.google)
        tensors.append(tf.constant(value.T if row.google_transposed else value))
    staging = tempfile.mkdtemp(dir=directory, prefix=".tmp-ckpt-")
    try:
        staged = os.path.join(staging, os.path.basename(prefix))
        tf.raw_ops.SaveV2(prefix=staged, tensor_names=names, shape_and_slices=[""] * len(names),
                          tensors=tensors)
        _write_state_file(staging, os.path.basename(prefix))
        replace_files(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return prefix


def replace_files(staging: str, directory: str) -> None:
    """Moves every file of `staging` into `directory`, all or none.

    The files being replaced are first moved aside; if any move fails, they
    are put back, so the directory holds either the old set or the new one.
    """
    names = sorted(os.listdir(staging))
    backup = tempfile.mkdtemp(dir=directory, prefix=".old-ckpt-")
    moved_aside, moved_in = [], []
    try:
        for name in names:
            if os.path.exists(os.path.join(directory, name)):
                os.replace(os.path.join(directory, name), os.path.join(backup, name))
                moved_aside.append(name)
        for name in names:
            os.replace(os.path.join(staging, name), os.path.join(directory, name))
            moved_in.append(name)
    except BaseException:
        for name in moved_in:
            os.remove(os.path.join(directory, name))
        for name in moved_aside:
            os.replace(os.path.join(backup, name), os.path.join(directory, name))
        raise
    finally:
        shutil.rmtree(backup, ignore_errors=True)


def _write_state_file(directory: str, basename: str) -> None:
    with open(os.path.join(directory, "checkpoint"), "w", encoding="utf-8") as handle:
        handle.write(f'model_checkpoint_path: "{basename}"\n'
                     f'all_model_checkpoint_paths: "{basename}"\n')


@dataclasses.dataclass(frozen=True)
class CheckpointVariable:
    """One variable of a checkpoint, for `kbert inspect`."""

    name: str
    shape: tuple
    dtype: str
    kbert_path: Optional[str]  # the kbert variable it feeds; None if unused

    @property
    def size(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1


def inspect_checkpoint(source: TensorSource) -> List[CheckpointVariable]:
    """Every variable of a checkpoint with the kbert variable it maps to."""
    blocks = block_count(source.shapes)
    mapping = known_names(source.fmt, blocks)
    return [CheckpointVariable(name, source.shapes[name], source.dtypes[name], mapping.get(name))
            for name in sorted(source.shapes)]
