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

#: A deflated storage may inflate to at most this many times its compressed bytes. torch.save stores its
#: storages uncompressed; deflate's own ceiling is about 1,032, which only a crafted or degenerate file nears.
_MAX_INFLATION = 64


class _StandIn:
    """What the pickle gets for a name it may ask for: a fresh object per file, with no attributes of its own,
    that refuses the pickle's BUILD (`__setstate__`). A stand-in shared by every file, whose attributes BUILD could
    set, let one crafted file change how every later file in the process was read."""

    __slots__ = ()

    def __setstate__(self, state):
        raise CheckpointError(f"its pickle sets the state of {self!r} (BUILD), which no saved tensor does")


class _Storage(_StandIn):
    """A storage type the pickle names (`torch.FloatStorage`, ...): the NumPy type of its bytes."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dtype", np.dtype(_STORAGES[name]))

    def __setattr__(self, key, value):
        raise CheckpointError(f"its pickle sets {key} of torch.{self.name}, which no saved tensor does")

    def __repr__(self):
        return f"torch.{self.name}"


class _Call(_StandIn):
    """A function the pickle may call (the tensor rebuilds, `OrderedDict`)."""

    __slots__ = ("function", "name")

    def __init__(self, function, name: str):
        object.__setattr__(self, "function", function)
        object.__setattr__(self, "name", name)

    def __setattr__(self, key, value):
        raise CheckpointError(f"its pickle sets {key} of {self.name}, which no saved tensor does")

    def __call__(self, *args):
        return self.function(*args)

    def __repr__(self):
        return self.name


def _rebuild_tensor(storage, offset, size, stride, *_ignored) -> np.ndarray:
    """`torch._utils._rebuild_tensor_v2`'s stand-in: the tensor's values as a NumPy array (a copy), once its
    shape and strides are checked to stay inside its storage and to hold no more elements than it."""
    if not isinstance(storage, np.ndarray) or not isinstance(size, (tuple, list)) or \
            not isinstance(stride, (tuple, list)):
        raise CheckpointError(f"a tensor rebuilt from {type(storage).__name__}, size {type(size).__name__} and "
                              f"strides {type(stride).__name__}: expected a storage and two tuples of whole numbers")
    size, stride = tuple(size), tuple(stride)
    numbers = (offset, *size, *stride)
    if not all(type(value) is int and value >= 0 for value in numbers) or len(size) != len(stride):
        raise CheckpointError(f"a tensor of size {_short(size)}, strides {_short(stride)} and offset "
                              f"{_short(offset)}: not a tensor's layout")
    if any(extent == 0 for extent in size):
        return np.zeros(size, storage.dtype)
    elements = int(np.prod(size, dtype=object))
    last = offset + sum((extent - 1) * step for extent, step in zip(size, stride))
    if last >= storage.size:
        raise CheckpointError(f"a tensor of size {_short(size)} and strides {_short(stride)} reaches element "
                              f"{_short(last)} of a storage of {storage.size}: the file is damaged or crafted")
    if elements > storage.size:  # zero strides: a few bytes on disk, any size in memory
        raise CheckpointError(f"a tensor of size {_short(size)} and strides {_short(stride)} holds {_short(elements)} "
                              f"elements, more than its storage's {storage.size}: the file is damaged or crafted")
    view = np.lib.stride_tricks.as_strided(storage[offset:], size, [step * storage.itemsize for step in stride])
    return np.array(view)


def _short(value) -> str:
    """`value` for a message, cut short: a crafted file's numbers may run to thousands of digits."""
    if isinstance(value, tuple):
        return "(" + ", ".join(_short(part) for part in value[:8]) + (", ...)" if len(value) > 8 else
                                                                      ",)" if len(value) == 1 else ")")
    if isinstance(value, int) and abs(value) >= 10 ** 30:
        return f"a number of {value.bit_length()} bits"
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _rebuild_parameter(data, *_ignored):
    """`torch._utils._rebuild_parameter`'s stand-in: an `nn.Parameter` is its tensor."""
    return data


def _allowed() -> dict:
    """The only names a tensor file's pickle may ask for, each a fresh stand-in for one file."""
    return {("collections", "OrderedDict"): _Call(collections.OrderedDict, "collections.OrderedDict"),
            ("torch._utils", "_rebuild_tensor_v2"): _Call(_rebuild_tensor, "torch._utils._rebuild_tensor_v2"),
            ("torch._utils", "_rebuild_parameter"): _Call(_rebuild_parameter, "torch._utils._rebuild_parameter"),
            **{("torch", name): _Storage(name) for name in _STORAGES}}


class _TensorUnpickler(pickle.Unpickler):
    def __init__(self, handle, archive: zipfile.ZipFile, prefix: str, path: str):
        super().__init__(handle)
        self.archive, self.prefix, self.path = archive, prefix, path
        self.allowed, self.storages = _allowed(), {}

    def find_class(self, module: str, name: str):
        if (module, name) not in self.allowed:
            raise CheckpointError(f"{self.path}: its pickle asks for {_short(module)}.{_short(name)}, which is not "
                                  "part of a saved tensor; kbert runs no code from a model file, so it is not loaded "
                                  "(convert it to safetensors with the tool that made it)")
        return self.allowed[(module, name)]

    def persistent_load(self, key):
        if not (isinstance(key, tuple) and len(key) == 5 and key[0] == "storage" and isinstance(key[1], _Storage)
                and isinstance(key[2], str) and type(key[4]) is int and key[4] >= 0):
            raise CheckpointError(f"{self.path}: a persistent id {_short(_describe(key))}; expected a tensor "
                                  "storage (\"storage\", its type, its key, its device, its number of elements)")
        if key[2] not in self.storages:  # one storage, however many tensors refer to it, is read once
            self.storages[key[2]] = self.read_storage(key[1], key[2], key[4])
        values = self.storages[key[2]]
        if values.dtype != (np.float32 if key[1].name == "BFloat16Storage" else key[1].dtype):
            raise CheckpointError(f"{self.path}: storage {key[2]!r} is named as two types")
        return values

    def read_storage(self, storage: _Storage, key: str, elements: int) -> np.ndarray:
        """Storage `key`'s `elements` values of `storage`'s type, its size checked against the archive's record
        before a byte is inflated."""
        member = f"{self.prefix}data/{key}"
        try:
            info = self.archive.getinfo(member)
        except KeyError:
            raise CheckpointError(f"{self.path}: no storage {key!r} in the archive; the file is damaged") from None
        expected = elements * storage.dtype.itemsize
        if info.file_size != expected:
            raise CheckpointError(f"{self.path}: storage {key!r} holds {info.file_size} bytes where the pickle "
                                  f"declares {elements} elements of {storage} ({expected} bytes)")
        if info.compress_type != zipfile.ZIP_STORED and info.file_size > _MAX_INFLATION * max(info.compress_size, 1):
            raise CheckpointError(f"{self.path}: storage {key!r} inflates {info.compress_size} bytes to "
                                  f"{info.file_size}, past {_MAX_INFLATION} times (torch.save stores storages "
                                  "uncompressed): a compression bomb, not read")
        values = np.frombuffer(self.archive.read(member), storage.dtype)
        if storage.name == "BFloat16Storage":  # bfloat16 is float32's upper half
            values = (values.astype(np.uint32) << 16).view(np.float32)
        return values


def _describe(key) -> str:
    """A persistent id for a message: its type and length, never a deep repr (a crafted id may nest deeply)."""
    if isinstance(key, tuple):
        return f"a tuple of {len(key)} ({', '.join(type(part).__name__ for part in key[:5])})"
    return f"a {type(key).__name__}"


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
    try:
        loaded = _read(path)
    except CheckpointError as error:
        message = str(error)
        raise CheckpointError(message if message.startswith(path) else f"{path}: {message}") from None
    except RecursionError:
        raise CheckpointError(f"{path}: its pickle nests too deeply to be a saved tensor dictionary") from None
    except MemoryError:
        raise CheckpointError(f"{path}: its pickle asks for more memory than this machine has") from None
    except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError, ValueError, TypeError, AttributeError, KeyError,
            IndexError, OverflowError, RuntimeError, NotImplementedError, OSError) as error:
        # zipfile's own words: a bad CRC, an encrypted member (RuntimeError), a compression it lacks
        # (NotImplementedError), data cut short (OSError "Invalid argument" from a seek past the end)
        raise CheckpointError(f"{path}: not a readable torch.save archive ({type(error).__name__}: "
                              f"{_short(str(error))})") from None
    if not isinstance(loaded, dict) or not all(isinstance(value, np.ndarray) for value in loaded.values()):
        raise CheckpointError(f"{path}: expected a dictionary of tensors (a state dict), got "
                              f"{type(loaded).__name__}")
    return {str(name): value for name, value in loaded.items()}


def _read(path: str):
    """What the archive at `path` pickles, read with only the stand-ins of `_allowed`."""
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path}: not a zip archive, so not the format torch.save writes since PyTorch 1.6 "
                              "(an older pickle is never loaded); save it again, or convert it to safetensors")
    with zipfile.ZipFile(path) as archive:
        names = [name for name in archive.namelist() if name.endswith("data.pkl")]
        if len(names) != 1:
            raise CheckpointError(f"{path}: expected one data.pkl in the archive, found {len(names)}")
        pickled = archive.getinfo(names[0])
        if pickled.compress_type != zipfile.ZIP_STORED and \
                pickled.file_size > _MAX_INFLATION * max(pickled.compress_size, 1):
            raise CheckpointError(f"{path}: {names[0]} inflates {pickled.compress_size} bytes to "
                                  f"{pickled.file_size}, past {_MAX_INFLATION} times: a compression bomb, not read")
        prefix = names[0][:-len("data.pkl")]
        order = f"{prefix}byteorder"
        if order in archive.namelist() and archive.read(order).strip() != b"little":
            raise CheckpointError(f"{path}: saved on a big-endian machine; kbert reads little-endian files")
        with archive.open(names[0]) as handle:
            return _TensorUnpickler(handle, archive, prefix, path).load()
