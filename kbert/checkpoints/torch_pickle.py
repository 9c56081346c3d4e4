"""PyTorch's `.pt` files read as NumPy arrays without torch, and without running any code they hold.

A `.pt` file (`torch.save`, the zip format of PyTorch 1.6 and later) is a zip of a pickle
(`ARCHIVE/data.pkl`) and each tensor's raw storage (`ARCHIVE/data/KEY`). A pickle can name any Python
callable and call it while it loads, which is how a crafted model file runs code on a machine that opens
it. `read_torch_tensors` unpickles with only what a saved tensor dictionary needs: `OrderedDict`, the
tensor rebuild of `torch._utils` and the storage types, each replaced by a NumPy stand-in. Any other name
the pickle asks for is refused before anything is called, naming it (what `torch.load(weights_only=True)`
does, without needing torch). A tensor's shape and strides are checked against its storage before a view is
made, so a crafted file cannot read past it.
"""

from __future__ import annotations

import collections
import os
import pickle
import zipfile
from typing import Dict

import numpy as np

from kbert.errors import CheckpointError

#: torch's storage types and the little-endian NumPy type of their bytes (bfloat16: its 16 bits, widened).
_STORAGES = {"FloatStorage": "<f4", "DoubleStorage": "<f8", "HalfStorage": "<f2", "BFloat16Storage": "<u2",
             "LongStorage": "<i8", "IntStorage": "<i4", "ShortStorage": "<i2", "CharStorage": "i1",
             "ByteStorage": "u1", "BoolStorage": "?"}


class _Storage:
    """A storage type the pickle names (`torch.FloatStorage`, ...): the NumPy type of its bytes."""

    def __init__(self, name: str):
        self.name, self.dtype = name, np.dtype(_STORAGES[name])


def _rebuild_tensor(storage: np.ndarray, offset: int, size, stride, *_ignored) -> np.ndarray:
    """`torch._utils._rebuild_tensor_v2`'s stand-in: the tensor's values as a NumPy array (a copy), once its
    shape and strides are checked to stay inside its storage."""
    size, stride = tuple(size), tuple(stride)
    numbers = (offset, *size, *stride)
    if not all(isinstance(value, int) and value >= 0 for value in numbers) or len(size) != len(stride):
        raise CheckpointError(f"a tensor of size {size}, strides {stride} and offset {offset}: not a tensor's layout")
    if any(extent == 0 for extent in size):
        return np.zeros(size, storage.dtype)
    last = offset + sum((extent - 1) * step for extent, step in zip(size, stride))
    if last >= storage.size:
        raise CheckpointError(f"a tensor of size {size} and strides {stride} reaches element {last} of a storage "
                              f"of {storage.size}: the file is damaged or crafted")
    view = np.lib.stride_tricks.as_strided(storage[offset:], size, [step * storage.itemsize for step in stride])
    return np.array(view)


def _rebuild_parameter(data, *_ignored):
    """`torch._utils._rebuild_parameter`'s stand-in: an `nn.Parameter` is its tensor."""
    return data


#: The only names a tensor file's pickle may ask for, and what each becomes.
_ALLOWED = {("collections", "OrderedDict"): collections.OrderedDict,
            ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
            ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
            **{("torch", name): _Storage(name) for name in _STORAGES}}


class _TensorUnpickler(pickle.Unpickler):
    def __init__(self, handle, archive: zipfile.ZipFile, prefix: str, path: str):
        super().__init__(handle)
        self.archive, self.prefix, self.path = archive, prefix, path

    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED:
            raise CheckpointError(f"{self.path}: its pickle asks for {module}.{name}, which is not part of a saved "
                                  "tensor; kbert runs no code from a model file, so it is not loaded (convert it to "
                                  "safetensors with the tool that made it)")
        return _ALLOWED[(module, name)]

    def persistent_load(self, key):
        if not (isinstance(key, tuple) and len(key) == 5 and key[0] == "storage" and isinstance(key[1], _Storage)):
            raise CheckpointError(f"{self.path}: a persistent id {key!r}; expected a tensor storage")
        storage = key[1]
        try:
            raw = self.archive.read(f"{self.prefix}data/{key[2]}")
        except KeyError:
            raise CheckpointError(f"{self.path}: no storage {key[2]!r} in the archive; the file is damaged") from None
        values = np.frombuffer(raw, storage.dtype, count=len(raw) // storage.dtype.itemsize)
        if storage.name == "BFloat16Storage":  # bfloat16 is float32's upper half
            values = (values.astype(np.uint32) << 16).view(np.float32)
        return values


def read_torch_tensors(path: "str | os.PathLike[str]") -> Dict[str, np.ndarray]:
    """The tensors of a PyTorch `.pt` file (a state dict: `{name: tensor}`), by name, as NumPy arrays (bfloat16 as
    float32); a `CheckpointError` names the file and what was wrong, and no code of the file is run.

    Example (a file that asks for `os.system` is refused before anything is called):
    >>> import io, pickle, zipfile, tempfile, os
    >>> class Crafted:
    ...     def __reduce__(self):
    ...         return os.system, ("echo ran",)
    >>> folder = tempfile.mkdtemp()
    >>> with zipfile.ZipFile(os.path.join(folder, "head.pt"), "w") as archive:
    ...     archive.writestr("head/data.pkl", pickle.dumps(Crafted()))
    >>> try:
    ...     read_torch_tensors(os.path.join(folder, "head.pt"))
    ... except CheckpointError as error:
    ...     print("asks for" in str(error) and "system, which is not part of a saved tensor" in str(error))
    True
    """
    path = os.fspath(path)
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path}: not a zip archive, so not the format torch.save writes since PyTorch 1.6 "
                              "(an older pickle is never loaded); save it again, or convert it to safetensors")
    with zipfile.ZipFile(path) as archive:
        names = [name for name in archive.namelist() if name.endswith("data.pkl")]
        if len(names) != 1:
            raise CheckpointError(f"{path}: expected one data.pkl in the archive, found {len(names)}")
        prefix = names[0][:-len("data.pkl")]
        order = f"{prefix}byteorder"
        if order in archive.namelist() and archive.read(order).strip() != b"little":
            raise CheckpointError(f"{path}: saved on a big-endian machine; kbert reads little-endian files")
        with archive.open(names[0]) as handle:
            try:
                loaded = _TensorUnpickler(handle, archive, prefix, path).load()
            except CheckpointError:
                raise
            except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as error:
                raise CheckpointError(f"{path}: not a readable tensor pickle ({error})") from None
    if not isinstance(loaded, dict) or not all(isinstance(value, np.ndarray) for value in loaded.values()):
        raise CheckpointError(f"{path}: expected a dictionary of tensors (a state dict), got "
                              f"{type(loaded).__name__}")
    return {str(name): value for name, value in loaded.items()}
