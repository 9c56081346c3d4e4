"""Loads named tensors into a kbert model: check everything, then assign.

Shared by the Google checkpoint and Hugging Face safetensors readers. The
order of work is what makes a load safe:

1. every model variable is matched to a source tensor through the weight
   table, and every shape is checked (with the allowed adjustments: fewer
   positions than the source, `keep_tokens` rows of the vocabulary);
2. all missing names and all mismatches are reported in one error;
3. every tensor is read (a corrupt file fails here);
4. only then is anything assigned. A failure in 1-3 leaves the model as it was.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbert.errors import CheckpointError, KbertError, first_line
from kbert.models import naming
from kbert.models.registry import get_family
from kbert.checkpoints.names import (block_count, check_hf_names, config_key_for, family_named_by, family_of,
                                    layer_of, weight_names)
from kbert.models.tables import GOOGLE, HF, WeightName
from kbert.checkpoints.undrawn import fill_on_initialize, forget_undrawn, initialize_undrawn, is_undrawn

logger = logging.getLogger("kbert")

_FORMAT_LABEL = {GOOGLE: "Google checkpoint", HF: "safetensors file"}


@dataclasses.dataclass
class TensorSource:
    """Named tensors in a file: their shapes, and a reader for one tensor.

    Attributes:
        path: the file, named in every message.
        fmt: `"google"` or `"hf"` (which names of the weight table apply).
        shapes: tensor name -> shape.
        dtypes: tensor name -> dtype name (e.g. "float32").
        read: reads one tensor as a NumPy array.
        roberta: the file is Hugging Face's RoBERTa layout (True), another
            layout (False), or nothing tells (None).
        layout_evidence: what told (a config's model_type, the names).
        stored_names: a tensor's name in the file, where it differs from `shapes`' (Jina's parametrized
            weights), by the name in `shapes`.
        read_stored: reads one tensor by its name in the file (the task LoRA pairs beside such weights).
    """

    path: str
    fmt: str
    shapes: Dict[str, Tuple[int, ...]]
    dtypes: Dict[str, str]
    read: Callable[[str], np.ndarray]
    roberta: Optional[bool] = None
    layout_evidence: str = ""
    stored_names: Dict[str, str] = dataclasses.field(default_factory=dict)
    read_stored: Optional[Callable[[str], np.ndarray]] = None


@dataclasses.dataclass
class LoadReport:
    """What a load did: tensors used, tensors left unused, adjustments made."""

    source: str
    loaded: List[str]
    unused: List[str]
    notes: List[str]

    def describe_unused(self) -> str:
        """The unused tensors, summarised (optimizer slots are counted, not listed)."""
        slots = [name for name in self.unused if name.endswith(("/adam_m", "/adam_v"))]
        others = [name for name in self.unused if name not in slots]
        parts = [f"{len(slots)} optimizer slots (adam_m/adam_v)"] if slots else []
        return ", ".join(parts + others)


def load_into(model, source: TensorSource, keep_tokens: Optional[Sequence[int]] = None,
              ignore_position_table: bool = False, compound_tokens: Optional[Sequence] = None,
              undrawn_only: bool = False) -> LoadReport:
    """Checks every tensor of `source` against `model`, then assigns them all.

    A position table in `source` for a model without one (NEZHA, RoFormer)
    means weights of another family: an error, unless `ignore_position_table`.
    `compound_tokens` (bert4keras's) appends a row per item to every
    vocabulary table: the (weighted) mean of the rows of its ids, counted in
    the vocabulary after `keep_tokens`.

    A model built in `kbert.checkpoints.undrawn.undrawn_weights` takes the tensors as its weights' first
    values, and its other weights are drawn; if the load fails, none is (the model is not to be used).
    `undrawn_only` loads those weights alone (a head built undrawn on a backbone already loaded): the
    others' tensors are neither read nor checked.
    """
    try:
        return _load_into(model, source, keep_tokens, ignore_position_table, compound_tokens, undrawn_only)
    except BaseException:
        forget_undrawn(variable for variable in model.variables if is_undrawn(variable))
        raise


def _load_into(model, source: TensorSource, keep_tokens, ignore_position_table: bool, compound_tokens,
               undrawn_only: bool):
    variables = {variable.path: variable for variable in model.weights if not undrawn_only or is_undrawn(variable)}
    keep = None if keep_tokens is None else np.asarray(keep_tokens, dtype=np.int64)
    compound = compound_rows(compound_tokens)
    plan, missing, mismatched, notes = [], [], [], []
    if source.fmt != GOOGLE:
        check_hf_names(family_of(model), source.path, "Nothing was loaded")
    _check_layout(family_of(model), source)
    for row in weight_names(model):
        if row.path not in variables:  # loaded already (`undrawn_only`)
            continue
        variable = variables[row.path]
        row = _tied_if_absent(row, source, notes)
        name = row.name(source.fmt)
        if name not in source.shapes:
            missing.append(row)
            continue
        stored = _part_shape(row, source.fmt, tuple(source.shapes[name]))
        wanted = tuple(variable.shape)
        rows, note = _row_selection(row, stored, wanted, keep, len(compound), source)
        if note:
            notes.append(note)
        selected = stored if rows is None else (len(rows),) + stored[1:]
        if compound and row.axes[0] == "vocab_size":
            _check_compound_ids(compound, selected[0], source.path)
            selected = (selected[0] + len(compound),) + selected[1:]
        if _in_keras_layout(row, source.fmt, selected) != wanted:
            mismatched.append((row, stored, wanted))
            continue
        _check_dtype(source, name, variable)
        plan.append((variable, row, rows))
    if missing or mismatched:
        raise CheckpointError(_mismatch_message(source, missing, mismatched, family_of(model)))
    if not (ignore_position_table or undrawn_only):
        _check_no_position_table(model, source, {row.name(source.fmt) for _, row, _ in plan})

    # Every tensor is read once before any is assigned, so a corrupt or truncated file fails with the model
    # untouched; then each is read again and assigned at once, so the load holds one tensor beyond the model
    # rather than a second copy of all its weights (benchmarks.large_load measures the peak). A model built
    # in `undrawn_weights` takes each tensor as its weight's first value instead (`kbert.checkpoints.undrawn`).
    for variable, row, rows in plan:
        _check_finite(source, row.name(source.fmt), _read(source, row, rows, variable))
    for variable, row, rows in plan:
        read = functools.partial(_stored_value, source, row, rows, variable, compound)
        if is_undrawn(variable):
            fill_on_initialize(variable, read)
        else:
            variable.assign(read())
    initialize_undrawn()

    loaded = list(dict.fromkeys(row.name(source.fmt) for _, row, _ in plan))  # GPT-2's c_attn feeds three
    used = set(loaded)
    report = LoadReport(source.path, loaded, sorted(n for n in source.shapes if n not in used), notes)
    for note in notes:
        logger.warning("%s", note)
    if report.unused and not undrawn_only:  # the rest fed the weights loaded before
        logger.info("%s: not used by the model: %s", source.path, report.describe_unused())
    return report


def _check_layout(family, source: TensorSource) -> None:
    """Refuses Hugging Face's RoBERTa weights for another family, and other weights for `hf_roberta`: the
    names match, but one model numbers positions from 2 and pads with id 1, the other from 0 with id 0."""
    wants_roberta = family.positions_after_padding
    if source.fmt == GOOGLE and family.google_absent:
        raise CheckpointError(f"{source.path}: a Google checkpoint, and model={family.name!r} has none: "
                              f"{family.google_absent}. Nothing was loaded")
    if source.roberta is None or source.roberta == wants_roberta:
        return
    difference = get_family("hf_roberta").layout_difference
    if source.roberta:
        raise CheckpointError(f"{source.path}: Hugging Face's RoBERTa layout ({source.layout_evidence}), which "
                              f"model={family.name!r} would compute wrong: {difference}. Nothing was loaded. Build "
                              "it with model='hf_roberta' (its config.json picks it)")
    raise CheckpointError(f"{source.path}: not Hugging Face's RoBERTa layout ({source.layout_evidence}), which "
                          f"model='hf_roberta' would compute wrong: {difference}. Nothing was loaded. Build it with "
                          "the family its config.json names")


# A position table itself (Google's `…/position_embeddings`, HF's `….position_embeddings.weight`), not
# its optimizer slots (`…/position_embeddings/adam_m`).
_POSITION_TABLE = re.compile(r"(^|[/.])position_embeddings(\.weight)?$")


def _check_no_position_table(model, source: TensorSource, used: set) -> None:
    """A position table the model does not use: the weights of another family (BERT's into NEZHA)."""
    table = next((name for name in source.shapes
                  if name not in used and _POSITION_TABLE.search(name)), None)
    if table is None:
        return
    family = family_of(model)
    raise CheckpointError(
        f"{source.path}: holds a position table ({table}, {source.shapes[table][0]} positions), but "
        f"model={family.name!r} has none: these look like the weights of another family (BERT's, RoBERTa's, "
        f"ALBERT's). Nothing was loaded. Build with that family's model= (e.g. 'bert'), or, to take the other "
        f"weights on purpose, call kbert.load_weights(model, path, ignore_position_table=True)")


def compound_rows(compound_tokens: Optional[Sequence]) -> List[Tuple[np.ndarray, np.ndarray]]:
    """bert4keras's `compound_tokens` as `(ids, weights)` pairs: an item is a list of ids (equal
    weights) or a pair `(ids, weights)`."""
    rows = []
    for index, item in enumerate(compound_tokens or []):
        ids, weights = (item, [1] * len(item)) if isinstance(item, (list, np.ndarray)) else item
        ids, weights = np.asarray(ids), np.asarray(weights, dtype=np.float64)
        if ids.ndim != 1 or not len(ids) or not np.issubdtype(ids.dtype, np.integer) or weights.shape != ids.shape:
            raise KbertError(f"compound_tokens[{index}]: expected a non-empty list of token ids, or a pair "
                             f"(ids, weights) of equal lengths, got {item!r}")
        rows.append((ids.astype(np.int64), weights))
    return rows


def _check_compound_ids(compound, vocab_size: int, path: str) -> None:
    for index, (ids, _) in enumerate(compound):
        outside = ids[(ids < 0) | (ids >= vocab_size)]
        if outside.size:
            raise CheckpointError(f"{path}: compound_tokens[{index}] has id(s) {outside[:5].tolist()} outside the "
                                  f"vocabulary of {vocab_size} it averages (after keep_tokens); nothing was loaded")


def _with_compound_rows(value: np.ndarray, row: WeightName, compound) -> np.ndarray:
    if not compound or row.axes[0] != "vocab_size":
        return value
    means = [np.average(value[ids], axis=0, weights=weights) for ids, weights in compound]
    return np.concatenate([value, np.asarray(means, dtype=value.dtype)])


def _row_selection(row: WeightName, stored, wanted, keep, compound: int, source: TensorSource):
    """Which source rows feed the variable (None: all), and a note if some are dropped.

    `compound` rows are made after the selection (`compound_tokens`), so the
    kept ones are the model's vocabulary less those.
    """
    if keep is not None and row.axes[0] == "vocab_size":
        if len(keep) + compound != wanted[0]:
            extra = (f" and compound_tokens {compound}", " + len(compound_tokens)") if compound else ("", "")
            raise CheckpointError(
                f"{source.path}: keep_tokens has {len(keep)} ids{extra[0]} but the model's vocab_size is "
                f"{wanted[0]}; nothing was loaded. Build the model with vocab_size = len(keep_tokens){extra[1]} "
                f"({len(keep) + compound})")
        out_of_range = keep[(keep < 0) | (keep >= stored[0])]
        if out_of_range.size:
            raise CheckpointError(
                f"{source.path}: keep_tokens has id(s) {out_of_range[:5].tolist()} outside the "
                f"checkpoint's vocabulary of {stored[0]} ({row.name(source.fmt)})")
        return keep, None
    if row.axes[0] == "max_position_embeddings" and len(stored) == 2 \
            and stored[1] == wanted[1] and stored[0] > wanted[0]:
        return (np.arange(wanted[0]),
                f"{source.path}: the model has {wanted[0]} positions, the checkpoint "
                f"{stored[0]}: using the first {wanted[0]} rows of {row.name(source.fmt)}")
    return None, None


def _tied_if_absent(row: WeightName, source: TensorSource, notes: List[str]) -> WeightName:
    """The row, reading the tensor its Hugging Face one is tied to when the file leaves it out."""
    if source.fmt != HF or row.hf in source.shapes or row.hf_tied not in source.shapes:
        return row
    notes.append(f"{source.path}: no {row.hf}; {row.path} reads {row.hf_tied}, which it is tied to")
    return dataclasses.replace(row, hf=row.hf_tied)


def _part_shape(row: WeightName, fmt: str, stored: tuple) -> tuple:
    """The shape of the row's slice of a stored tensor (the whole shape when it does not divide)."""
    _, parts = row.part(fmt)
    axis = row.part_axis(fmt) % len(stored) if stored else 0
    if parts == 1 or stored[axis] % parts:
        return stored
    return stored[:axis] + (stored[axis] // parts,) + stored[axis + 1:]


def _in_keras_layout(row: WeightName, fmt: str, shape: tuple) -> tuple:
    """A shape as stored in `fmt`, seen in the Keras layout (and back: the flip is its own inverse)."""
    return shape[::-1] if row.transposed(fmt) else shape


def _check_dtype(source: TensorSource, name: str, variable) -> None:
    """Refuses integer or boolean data where the model holds floats: bytes of the same size would otherwise
    load as numbers that were never weights."""
    stored = str(source.dtypes.get(name, "float32"))
    if "float" in str(variable.dtype) and "float" not in stored:  # hf's names: float16, bfloat16, float32, ...
        raise CheckpointError(f"{source.path}: {name} holds {stored} data, but the model's weight "
                              f"{variable.path} is {variable.dtype}; expected floating-point weights (the file is "
                              "damaged or not a model's checkpoint)")


def _check_finite(source: TensorSource, name: str, value: np.ndarray) -> None:
    """Refuses NaN or infinite weights (a diverged run's): every output of the model would be NaN, which no JSON
    answer carries. Checked before any weight is assigned, so the model is left untouched."""
    if np.issubdtype(value.dtype, np.floating) and not _all_finite(value):
        raise CheckpointError(f"{source.path}: {name} holds NaN or infinite values; the run that wrote it "
                              "diverged, or the file is damaged")


def _all_finite(value: np.ndarray, elements: int = 1 << 22) -> bool:
    """Whether every value is finite, checked a block of rows at a time: the check's flags of a large table (a
    151,669-token one) never stand beside it whole."""
    if value.ndim == 0:
        return bool(np.isfinite(value))
    step = max(1, elements // max(1, value[0].size))
    return all(np.isfinite(value[start:start + step]).all() for start in range(0, len(value), step))


def _stored_value(source: TensorSource, row: WeightName, rows, variable, compound):
    """The value `variable` takes from `source`, as the backend takes it without another copy: Keras converts a
    NumPy bfloat16 array for PyTorch through float32 (torch reads no NumPy bfloat16), so there it is a torch view
    of the array read (`benchmarks.large_load` measures what a load holds beyond the model)."""
    import keras

    # Contiguous: a weight read transposed (a Hugging Face kernel) would otherwise keep its strides on PyTorch,
    # whose products then round differently from the same weight assigned.
    value = np.ascontiguousarray(_with_compound_rows(_read(source, row, rows, variable), row, compound))
    if keras.backend.backend() == "torch" and value.dtype.name == "bfloat16":
        import torch

        return torch.from_numpy(value.view(np.uint16)).view(torch.bfloat16).reshape(tuple(variable.shape))
    return value


def _read(source: TensorSource, row: WeightName, rows, variable) -> np.ndarray:
    name = row.name(source.fmt)
    try:
        value = source.read(name)
    except CheckpointError:
        raise
    except Exception as error:  # each reader's own errors: corrupt or truncated data
        raise CheckpointError(f"{source.path}: cannot read {name}: {first_line(error)}") from None
    if rows is not None:
        value = value[rows]
    index, parts = row.part(source.fmt)
    if parts > 1:
        axis = row.part_axis(source.fmt) % value.ndim
        width = value.shape[axis] // parts
        value = np.take(value, np.arange(index * width, (index + 1) * width), axis=axis)
    if row.transposed(source.fmt):
        value = value.T
    return np.asarray(value, dtype=variable.dtype)


def _mismatch_message(source: TensorSource, missing: List[WeightName], mismatched, family) -> str:
    label = _FORMAT_LABEL[source.fmt]
    lines = [f"{source.path}: this {label} does not fit the model; nothing was loaded."]
    if missing:
        lines.append(f"Missing {len(missing)} variable(s) the model needs:")
        lines += [f"  {row.name(source.fmt)} (for {row.path})" for row in missing]
        hint = _missing_hint(source, missing, family)
        if hint:
            lines.append(f"Hint: {hint}")
    for row, stored, wanted in mismatched:
        # A transpose is its own inverse: the same flip goes either way.
        stored_in_keras = _in_keras_layout(row, source.fmt, stored)
        key = config_key_for(row, wanted, stored_in_keras)
        line = (f"Shape mismatch: {row.name(source.fmt)} has shape {list(stored)} in the checkpoint, "
                f"the model's {row.path} needs {list(_in_keras_layout(row, source.fmt, wanted))}")
        if key and key not in ("2", "num_labels"):
            axis = row.axes.index(key)
            line += (f"; check {key!r} in the config (the checkpoint has {stored_in_keras[axis]}, "
                     f"the config {wanted[axis]})")
        lines.append(line)
    return "\n".join(lines)


BERT_NAMED = ("bert", "roberta", "nezha", "roformer")  # the families whose checkpoints use BERT's names


def _missing_hint(source: TensorSource, missing: List[WeightName], family) -> Optional[str]:
    named_by = family_named_by(source.shapes)
    # Hugging Face's names cannot tell mT5 from T5.1.1.
    same_layout = family.name.startswith(named_by) or (named_by == "t5.1.1" and family.name.startswith("mt5.1.1"))
    if named_by != "bert" and not same_layout:
        return f"the checkpoint's names are {named_by}'s: build the model with model={named_by!r}"
    if named_by == "bert" and family.name not in BERT_NAMED:
        return (f"the checkpoint's names are BERT's (which RoBERTa, NEZHA and RoFormer share), not "
                f"{family.name}'s: build the model with model='bert' (or 'roberta', 'nezha', 'roformer')")
    layers = sorted({layer_of(row.path) for row in missing})
    if layers == [naming.EMBEDDING_POSITION]:
        return ("the checkpoint has no position table: NEZHA (relative positions) and RoFormer (rotary) "
                "checkpoints use BERT's other names without one; build with model='nezha' or model='roformer'")
    names = [row.name(source.fmt) for row in missing]
    if all(name.startswith(("cls/", "cls.", *family.hf_head_scopes)) for name in names):
        return (f"this checkpoint has no {names[0].split('/')[0].split('.')[0]}* variables for "
                f"{', '.join(layers)}: build without with_mlm/with_nsp")
    if layers == [naming.POOLER_DENSE]:
        return "this checkpoint has no pooler: build without with_pool"
    if layers == [naming.CLASSIFIER_DENSE]:
        return ("this checkpoint has no classifier head: load it into the backbone, then call "
                "build_classifier")
    if all(naming.parse_block(layer) for layer in layers):
        blocks = block_count(source.shapes)
        if blocks:
            return (f"the checkpoint has {blocks} Transformer blocks: "
                    f"check 'num_hidden_layers' in the config")
    if source.fmt == GOOGLE and any("." in name and "/" not in name for name in source.shapes):
        return "the names look like Hugging Face tensors: use load_hf_weights"
    if source.fmt != GOOGLE and any("/" in name for name in source.shapes):
        return "the names look like a Google checkpoint: use load_google_checkpoint"
    return None

