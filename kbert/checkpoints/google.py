"""Google BERT checkpoints (`bert_model.ckpt`): load and save.

Reading goes through TensorFlow's own checkpoint reader
(`tf.train.load_checkpoint`); writing through `SaveV2`, which produces the
same name-based TF1 layout as Google's releases (`bert/embeddings/...`,
`cls/predictions/...`). Names come from the weight table in `kbert.models.tables`.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from typing import Optional, Sequence

from kbert.errors import CheckpointError, first_line, require_tensorflow
from kbert.checkpoints.loader import LoadReport, TensorSource, load_into
from kbert.io import replace_files
from kbert.checkpoints.names import values_for
from kbert.models.tables import GOOGLE

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


_READING = "reading a Google (TF) checkpoint"
_CONVERT = "convert it to safetensors with `kbert convert` where TensorFlow is installed and load that"


def _prefix_in_directory(directory: str) -> str:
    state = os.path.join(directory, "checkpoint")
    if os.path.exists(state):
        tf = require_tensorflow(_READING, _CONVERT)

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
    tf = require_tensorflow(_READING, _CONVERT)

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

    Example (with Google's release: `build_transformer_model(
    "chinese_L-12_H-768_A-12/bert_config.json")`, then this function on
    `"chinese_L-12_H-768_A-12/bert_model.ckpt"`); here a tiny model's own
    checkpoint, written and read back:
    >>> import os, tempfile
    >>> from kbert import build_transformer_model, bundled_config_path
    >>> bert = build_transformer_model(bundled_config_path("bert_tiny"))
    >>> prefix = save_google_checkpoint(bert, os.path.join(tempfile.mkdtemp(), "bert_model.ckpt"))
    >>> report = load_google_checkpoint(bert, prefix)
    >>> len(report.loaded), report.loaded[0], report.unused
    (37, 'bert/embeddings/word_embeddings', [])
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
    values = values_for(model, GOOGLE)  # a family with no Google layout is refused before TensorFlow is needed
    tf = require_tensorflow("writing a Google (TF) checkpoint", "save Hugging Face safetensors (save_hf_weights)")

    prefix = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(prefix)
    os.makedirs(directory, exist_ok=True)
    names = [row.google for row, _ in values]
    tensors = [tf.constant(value) for _, value in values]
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


def _write_state_file(directory: str, basename: str) -> None:
    with open(os.path.join(directory, "checkpoint"), "w", encoding="utf-8") as handle:
        handle.write(f'model_checkpoint_path: "{basename}"\n'
                     f'all_model_checkpoint_paths: "{basename}"\n')
