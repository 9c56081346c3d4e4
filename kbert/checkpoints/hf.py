"""Hugging Face `model.safetensors`: import into kbert, export from kbert.

Reads and writes with the `safetensors` library (NumPy; no PyTorch needed).
Reads a sharded checkpoint too (`model.safetensors.index.json` and the
`model-0000i-of-0000n.safetensors` files it names); writes one file, or
shards of at most `max_shard_size` bytes with their index, as transformers does.
Accepts the tensors of a bare model (`BertModel`: `embeddings.word_embeddings.weight`,
...) and of a task model (`BertForPreTraining`: the `bert.` prefix, `cls.*`
heads), of each family that `kbert.checkpoints.names.hf_families` lists, and
the `gamma`/`beta` LayerNorm names of older conversions. Linear weights are
stored transposed (`[out, in]`); each family's weight table
(`kbert.models.<family>.family`) gives its names and says which.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from kbert.errors import CheckpointError, ConfigError, first_line
from kbert.io import ModelFolder, atomic_copy, atomic_path, atomic_write_text
from kbert.checkpoints.loader import LoadReport, TensorSource, load_into
from kbert.checkpoints.names import family_of, hf_families, hf_prefixes, values_for
from kbert.checkpoints.task_adapters import (EVERY_TASK, adapted_source, assign_task_pairs, has_task_lora,
                                            is_adapter_tensor, task_pairs, unwrapped_name)
from kbert.models.config import read_json_object
from kbert.models.registry import get_family, model_type_of
from kbert.models.heads import Heads
from kbert.models.tables import HF
from kbert.models.transformer import built_config

logger = logging.getLogger("kbert")
WEIGHTS_NAME, CONFIG_NAME, VOCAB_NAME, SENTENCEPIECE_NAME = (
    "model.safetensors", "config.json", "vocab.txt", "spiece.model")
INDEX_NAME = "model.safetensors.index.json"  # a sharded checkpoint's map of tensor names to files
_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
           "I64": "int64", "I32": "int32", "U8": "uint8", "BOOL": "bool"}


def resolve_safetensors_path(path: "str | os.PathLike[str]") -> str:
    """`path` itself if it is a file, else `path/model.safetensors` or a sharded checkpoint's index in `path`."""
    path = os.fspath(path)
    if os.path.isdir(path):
        for name in (WEIGHTS_NAME, INDEX_NAME):
            if os.path.exists(os.path.join(path, name)):
                return os.path.join(path, name)
        raise CheckpointError(f"{path}: no {WEIGHTS_NAME} in this directory (nor the {INDEX_NAME} of a "
                              "sharded checkpoint)")
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: file not found")
    return path


def open_safetensors(path: "str | os.PathLike[str]", adapter: Optional[str] = None) -> TensorSource:
    """The tensors of a safetensors file, or of the shards an index names, under kbert's canonical HF names.

    A file with task LoRA adapters (Jina's jina-embeddings-v3: `kbert.checkpoints.task_adapters`) gives the task
    `adapter`'s weights (`retrieval.query`, ...), or with None the base weights; with `EVERY_TASK` the base
    weights, the pairs read apart (`read_stored`)."""
    folder = path if isinstance(path, ModelFolder) else None  # its config.json, where read already
    path = resolve_safetensors_path(path)
    index = _shard_index(path) if path.endswith(".json") else None
    stored, stored_dtypes, files = {}, {}, {}
    for file in sorted(set(index.values())) if index else [path]:
        shapes, dtypes = _header(file)
        stored.update(shapes)
        stored_dtypes.update(dtypes)
        files.update(dict.fromkeys(shapes, file))
    for name, file in (index or {}).items():
        if files.get(name) != file:
            raise CheckpointError(f"{path}: names {name!r} in {os.path.basename(file)}, which does not hold it; "
                                  "the index and its shards are from different downloads: fetch them again")
    roberta, evidence = _roberta_layout(folder or ModelFolder(os.path.dirname(path)), stored)
    # A bare backbone's names are its own (DistilBertModel's `transformer.layer.0...` is no GPT-2 scope).
    bare = any(name.startswith("embeddings.") for name in stored)
    canonical = {_canonical_name(unwrapped_name(name), bare): name for name in stored
                 if not is_adapter_tensor(name)}
    shapes = {name: stored[original] for name, original in canonical.items()}
    dtypes = {name: stored_dtypes[original] for name, original in canonical.items()}

    def read_stored(name: str) -> np.ndarray:
        return read_in_blocks(files[name], name)

    read_adapted = adapted_source(path, stored, read_stored, adapter)

    def read(name: str) -> np.ndarray:
        return read_adapted(canonical[name])

    return TensorSource(path, HF, shapes, dtypes, read, roberta, evidence, canonical, read_stored)


def read_in_blocks(path: str, name: str, elements: int = 1 << 22) -> np.ndarray:
    """The tensor `name` of the safetensors file at `path`, read a block of rows (about `elements` values) at a
    time, the file opened anew for each. safetensors maps the file: every page a read touches stays in the
    process's memory until the file closes, so a tensor read whole stood twice in memory at the load's peak (a
    151,669-token bfloat16 table: 592 MiB for its 296; `benchmarks.large_load`); read so, it stands once, beside a
    block."""
    from safetensors import safe_open

    with safe_open(path, framework="np") as handle:
        piece = handle.get_slice(name)
        shape = tuple(piece.get_shape())
        step = max(1, elements // max(1, int(np.prod(shape[1:], dtype=np.int64)))) if shape else 0
        if not shape or shape[0] <= step:
            return handle.get_tensor(name)
        first = piece[0:step]
    value = np.empty(shape, first.dtype)
    value[:step] = first
    del first
    for start in range(step, shape[0], step):
        with safe_open(path, framework="np") as handle:
            value[start:start + step] = handle.get_slice(name)[start:min(start + step, shape[0])]
    return value


def _header(path: str) -> tuple:
    """The shapes and dtypes of one safetensors file's tensors, read from its header."""
    from safetensors import SafetensorError, safe_open

    if not os.path.exists(path):
        raise CheckpointError(f"{path}: file not found (a shard its index names)")
    try:
        with safe_open(path, framework="np") as handle:
            slices = {name: handle.get_slice(name) for name in handle.keys()}
            return ({name: tuple(piece.get_shape()) for name, piece in slices.items()},
                    {name: _DTYPES.get(piece.get_dtype(), piece.get_dtype()) for name, piece in slices.items()})
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{path}: not a readable safetensors file ({first_line(error)})") from None


def _shard_index(path: str) -> Dict[str, str]:
    """Each tensor's shard (its path), from a sharded checkpoint's `model.safetensors.index.json`."""
    try:
        with open(path, encoding="utf-8") as handle:
            weight_map = json.load(handle)["weight_map"]
        if not (isinstance(weight_map, dict) and weight_map
                and all(isinstance(file, str) and os.path.basename(file) == file for file in weight_map.values())):
            raise ValueError("weight_map must map each tensor name to a file name beside the index")
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{path}: not a safetensors index ({first_line(error) or 'no weight_map'}); "
                              "expected Hugging Face's {\"weight_map\": {tensor name: shard file name}}") from None
    directory = os.path.dirname(os.path.abspath(path))
    return {name: os.path.join(directory, file) for name, file in weight_map.items()}


def _roberta_types() -> set:
    """The model_types numbered as Hugging Face's RobertaModel (XLM-R, CamemBERT, MPNet): positions from
    padding_idx + 1 = 2, `<s>` = 0, padding = 1."""
    families = [get_family(name) for name in hf_families()]
    return {model_type for family in families if family.positions_after_padding
            for model_type in (family.model_type, *family.model_type_aliases)}


def _named_like_roberta() -> set:
    """The model_types not numbered as RoBERTa whose files still use its scopes (`roberta.`, `lm_head.`):
    Jina-v3's and GTE's, told apart by their config.json."""
    families = [get_family(name) for name in hf_families()]
    return {family.model_type for family in families if not family.positions_after_padding
            and (family.hf_prefix == "roberta" or "lm_head." in family.hf_head_scopes)}


def _roberta_layout(folder: ModelFolder, names) -> Tuple[Optional[bool], str]:
    """Whether a safetensors file is Hugging Face's RoBERTa layout (True), another's (False) or cannot tell
    (None), and the evidence: RoBERTa's task-model prefixes, the `model_type` of the config.json beside it,
    BERT's task-model prefixes.

    The bare models' tensor names are the same in both (`embeddings.word_embeddings.weight`, ...), but the
    computations differ (positions from 2, `<s>` at 0), so a file is loaded into the family it was made by.
    """
    config_path = folder.file(CONFIG_NAME)
    model_type = None
    if folder.has(CONFIG_NAME):
        try:
            model_type = model_type_of(folder.parsed(CONFIG_NAME, read_json_object), config_path)
        except (OSError, ValueError, AttributeError, ConfigError):
            model_type = None  # the config is checked, with its own errors, where it is read
    if model_type in _named_like_roberta():
        return False, f"model_type {model_type!r} in {config_path}"
    if any(name.startswith(("roberta.", "lm_head.dense.")) for name in names):  # not T5's lm_head.weight
        return True, "tensors named roberta.* / lm_head.dense.*"
    if isinstance(model_type, str):
        return model_type in _roberta_types(), f"model_type {model_type!r} in {config_path}"
    if any(name.startswith(("bert.", "cls.")) for name in names):
        return False, "tensors named bert.* / cls.*"
    return None, ""


def load_hf_weights(
    model, path: "str | os.PathLike[str]", keep_tokens: Optional[Sequence[int]] = None,
    adapter: Optional[str] = None, undrawn_only: bool = False,
) -> LoadReport:
    """Loads Hugging Face weights (`model.safetensors`) into a kbert model.

    BERT, RoBERTa (as BERT checkpoints), ALBERT, ELECTRA, RoFormer, NEZHA
    (transformers 4.x's layout), GPT-2, T5 and mT5, as the bare model
    (`BertModel`) or a task model (`BertForPreTraining`, `AlbertForMaskedLM`,
    `GPT2LMHeadModel`, `T5ForConditionalGeneration`, ...). Checks every tensor
    before assigning any, as `load_google_checkpoint` does.

    Args:
        model: a model from `build_transformer_model`.
        path: a `.safetensors` file, or a directory holding `model.safetensors`.
        keep_tokens: vocabulary ids to keep, as for `load_google_checkpoint`.
        adapter: the task LoRA adapter to merge in, for a file that holds them (Jina's jina-embeddings-v3:
            `retrieval.query`, `retrieval.passage`, `separation`, `classification`, `text-matching`); None:
            the base weights. A model built with `task_lora` loads the base weights and every task's pair.
        undrawn_only: load only the weights built undrawn (`kbert.checkpoints.undrawn`): a head added to a
            backbone loaded already.

    Example (with a Hugging Face download: `build_transformer_model(
    "all-MiniLM-L6-v2/config.json")`, then this function on the directory);
    here a tiny model's own safetensors, written and read back:
    >>> import tempfile
    >>> from kbert import build_transformer_model, bundled_config_path
    >>> bert = build_transformer_model(bundled_config_path("bert_tiny"))
    >>> path = save_hf_weights(bert, tempfile.mkdtemp())
    >>> report = load_hf_weights(bert, path)
    >>> len(report.loaded), report.loaded[0]
    (37, 'embeddings.word_embeddings.weight')
    """
    if not has_task_lora(model):
        return load_into(model, open_safetensors(path, adapter), keep_tokens=keep_tokens, undrawn_only=undrawn_only)
    if adapter is not None or keep_tokens is not None:
        raise CheckpointError(f"{path}: the model holds every task's LoRA pair (built with task_lora), so it loads "
                              "them all, with the whole vocabulary: load it without adapter= and keep_tokens=")
    source = open_safetensors(path, EVERY_TASK)
    pairs = task_pairs(model, source)  # every pair read and checked before anything is assigned
    report = load_into(model, source)
    assign_task_pairs(pairs)
    return report


def save_hf_weights(model, path: "str | os.PathLike[str]",
                    vocab: "Optional[str | os.PathLike[str]]" = None, max_shard_size: Optional[int] = None) -> str:
    """Writes the model as Hugging Face's `model.safetensors` (atomically); returns its path.

    With `max_shard_size` (bytes; `parse_size("2GB")`), a model larger than
    that is written as shards `model-0000i-of-0000n.safetensors` of at most
    that size (a larger tensor alone in its shard) and transformers' index
    `model.safetensors.index.json`, written last, whose path is returned; the
    files of the other layout left in the directory by an earlier save go.

    `path` is a `.safetensors` file, or a directory. A directory also receives
    `config.json` (Hugging Face's keys, `model_type`, and the class in
    `architectures`) and, given `vocab`, a copy of it as `vocab.txt` (a
    SentencePiece `.model`: as `spiece.model`): a directory that
    `transformers`' `from_pretrained` loads. A model with heads
    is written as the family's task model (`BertForPreTraining`,
    `AlbertForMaskedLM`, `ElectraForPreTraining`, ...), its backbone under the
    family's prefix (`bert.`, `albert.`, ...); a backbone as the bare model.
    """
    from safetensors.numpy import save_file

    path = os.fspath(path)
    if has_task_lora(model):
        raise CheckpointError(f"{path}: not written: the model holds every task's LoRA pair (built with task_lora) "
                              "and a Hugging Face file holds one set of weights; load it with adapter=TASK to write "
                              "that task's, or copy the hub's own files")
    directory = None
    if os.path.isdir(path) or not path.endswith(".safetensors"):
        directory, path = path, os.path.join(path, WEIGHTS_NAME)
    family = family_of(model)
    values = _whole_tensors(values_for(model, HF))
    config = built_config(model, family)
    if config is not None:
        values += list(family.hf_computed_tensors(config).items())
    unprefixed = family.hf_head_scopes + ("classifier.",)
    # A classifier is a task model too (`...ForSequenceClassification`): its backbone under the prefix.
    with_heads = family.hf_with_heads([name for name, _ in values]) or any(
        name.startswith("classifier.") for name, _ in values)
    tensors: Dict[str, np.ndarray] = {}
    for name, value in values:
        name = name if name.startswith(unprefixed) or not with_heads else f"{family.hf_prefix}.{name}"
        tensors[name] = np.ascontiguousarray(value)
    shards = _shards(tensors, max_shard_size) if max_shard_size else [tensors]
    if len(shards) > 1 and directory is None:
        raise CheckpointError(f"{path}: a sharded checkpoint is several files and an index; give a directory")
    if len(shards) > 1:
        path = _save_shards(shards, directory)
    else:
        with atomic_path(path) as temporary:
            save_file(tensors, temporary, metadata={"format": "pt"})
        if directory is not None:
            _remove_stale(directory, INDEX_NAME)
    if directory is not None and config is not None:
        _write_hf_config(model, family, config, directory, vocab)
    if directory is not None and vocab is not None:  # under the name Hugging Face's tokenizers look for
        name = SENTENCEPIECE_NAME if os.fspath(vocab).endswith(".model") else VOCAB_NAME
        atomic_copy(vocab, os.path.join(directory, name))
    for difference in family.hf_differences(config) if config is not None else []:
        logger.warning("%s: transformers will compute otherwise than this kbert model: %s", path, difference)
    return path


_SIZE_UNITS = {"": 1, "B": 1, "KB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9, "KIB": 2 ** 10, "MIB": 2 ** 20,
               "GIB": 2 ** 30}


def parse_size(text: str) -> int:
    """Bytes from a size as transformers writes it: `5GB`, `500MB`, `2GiB` or a whole number of bytes.

    >>> parse_size("5GB"), parse_size("100KiB"), parse_size("4096")
    (5000000000, 102400, 4096)
    """
    number = text.strip()
    digits = len(number) - len(number.lstrip("0123456789."))
    value, unit = number[:digits], number[digits:].strip().upper()
    if not value or unit not in _SIZE_UNITS or float(value) <= 0:
        raise CheckpointError(f"max shard size: expected a size such as 5GB, 500MB, 2GiB or a number of bytes, "
                              f"got {text!r}")
    return int(float(value) * _SIZE_UNITS[unit])


def _shards(tensors: Dict[str, np.ndarray], max_size: int) -> list:
    """The tensors in order, cut into groups of at most `max_size` bytes (a larger tensor alone in its own)."""
    shards, size = [{}], 0
    for name, value in tensors.items():
        if shards[-1] and size + value.nbytes > max_size:
            shards.append({})
            size = 0
        shards[-1][name] = value
        size += value.nbytes
    return shards


def _save_shards(shards: list, directory: str) -> str:
    """Each shard, then the index (last: a reader finds the index only once every shard it names is there)."""
    from safetensors.numpy import save_file

    weight_map, names = {}, [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
    for name, shard in zip(names, shards):
        with atomic_path(os.path.join(directory, name)) as temporary:
            save_file(shard, temporary, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, name))
    total = sum(value.nbytes for shard in shards for value in shard.values())
    index = os.path.join(directory, INDEX_NAME)
    atomic_write_text(index, json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
                      + "\n")
    _remove_stale(directory, WEIGHTS_NAME, keep=set(names))
    return index


def _remove_stale(directory: str, name: str, keep: frozenset = frozenset()) -> None:
    """Removes the other layout's files that an earlier save left in `directory` (a reader would take the
    single file before the index, or meet shards that no index names): `name`, and shards not in `keep`."""
    stale = [name] + [file for file in os.listdir(directory)
                      if file.startswith("model-") and file.endswith(".safetensors") and file not in keep]
    for file in stale:
        if os.path.exists(os.path.join(directory, file)):
            logger.info("%s: removed %s, left by an earlier save in the other layout", directory, file)
            os.remove(os.path.join(directory, file))


def _whole_tensors(values) -> list:
    """(name, tensor) pairs, the slices of a fused tensor (GPT-2's `c_attn`, GTE's `up_gate_proj`) joined in order."""
    whole, slices, axes = [], {}, {}
    for row, value in values:
        index, parts = row.hf_part
        if parts == 1:
            whole.append((row.hf, value))
        else:
            slices.setdefault(row.hf, [None] * parts)[index] = value
            axes[row.hf] = row.part_axis(HF)
    return whole + [(name, np.concatenate(pieces, axis=axes[name])) for name, pieces in slices.items()]


def _write_hf_config(model, family, config, directory: str, vocab) -> None:
    heads = Heads(**model.build_spec["heads"])  # recorded by the builder, as the config is
    keys = family.hf_config(config, heads)
    if "decoder_start_token_id" in keys and vocab is not None and not os.fspath(vocab).endswith(".model"):
        keys.update(_wordpiece_framing(vocab))
    atomic_write_text(os.path.join(directory, CONFIG_NAME), json.dumps(keys, indent=2, sort_keys=True) + "\n")


def _wordpiece_framing(vocab) -> dict:
    """A T5 on a WordPiece vocabulary (kbert's seq2seq, T5 PEGASUS) starts its decoder from `[CLS]` and
    ends with `[SEP]`, not SentencePiece T5's 0 and 1."""
    from kbert.tokenizers.vocab import load_vocab

    ids = load_vocab(vocab)
    missing = [token for token in ("[CLS]", "[SEP]") if token not in ids]
    if missing:
        raise CheckpointError(f"{vocab}: no {' or '.join(missing)} in this vocabulary, which a T5 on WordPiece "
                              "starts and ends its decoder with")
    return {"decoder_start_token_id": ids["[CLS]"], "eos_token_id": ids["[SEP]"]}


def _canonical_name(name: str, bare: bool = False) -> str:
    """The backbone's prefix (`bert.`, `albert.`, ...) dropped, unless the file is a `bare` backbone; old
    `gamma`/`beta` LayerNorm names made `weight`/`bias`."""
    prefix = "" if bare else next((prefix for prefix in hf_prefixes() if name.startswith(prefix)), "")
    name = name[len(prefix):]
    if ".LayerNorm." in name or name.startswith("LayerNorm."):
        name = name.replace(".gamma", ".weight").replace(".beta", ".bias")
    return name

