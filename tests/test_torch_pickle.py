"""PyTorch `.pt` files read without torch and without running their pickle's code (bge-m3's extra heads,
`colbert_linear.pt` and `sparse_linear.pt`, are such files).

Without torch: archives written here in torch.save's layout (a crafted pickle that would run a command, a tensor
whose strides reach past its storage, an old non-zip pickle), each refused with nothing run. In the parity venv:
tensors `torch.save` writes (float32, float16, bfloat16, int64, a transposed view, a Linear's state dict) read back
equal.
"""

import pickle
import zipfile

import numpy as np
import pytest

from conftest import write_crafted_pt


def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(tmp_path):
    from kbert.checkpoints.torch_pickle import read_torch_tensors
    from kbert.errors import CheckpointError

    witness = tmp_path / "ran"
    write_crafted_pt(tmp_path / "sparse_linear.pt", witness)
    with pytest.raises(CheckpointError, match=r"sparse_linear.pt: its pickle asks for \w+\.system, which is not part "
                                              "of a saved tensor"):
        read_torch_tensors(tmp_path / "sparse_linear.pt")
    assert not witness.exists()


def storage_archive(path, pickled: bytes, storage: bytes) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("head/data.pkl", pickled)
        archive.writestr("head/data/0", storage)
        archive.writestr("head/byteorder", "little")


def test_strides_past_the_storage_are_refused(tmp_path):
    from kbert.checkpoints.torch_pickle import read_torch_tensors
    from kbert.errors import CheckpointError

    values = np.arange(6, dtype="<f4").tobytes()
    storage_archive(tmp_path / "fine.pt", handwritten_tensor((2, 3), (3, 1)), values)
    np.testing.assert_array_equal(read_torch_tensors(tmp_path / "fine.pt")["weight"], np.arange(6).reshape(2, 3))
    storage_archive(tmp_path / "transposed.pt", handwritten_tensor((3, 2), (1, 3)), values)
    np.testing.assert_array_equal(read_torch_tensors(tmp_path / "transposed.pt")["weight"],
                                  np.arange(6).reshape(2, 3).T)
    storage_archive(tmp_path / "crafted.pt", handwritten_tensor((2, 3), (300, 1)), values)
    with pytest.raises(CheckpointError, match=r"reaches element 302 of a storage of 6: the file is damaged or "
                                              "crafted"):
        read_torch_tensors(tmp_path / "crafted.pt")


def handwritten_tensor(size, stride, entries=1, numel=6, before=b"") -> bytes:
    """The pickle torch.save writes for `{"weight": tensor}` of a `numel`-float storage, opcode by opcode (protocol
    2); with `entries` > 1, `{"weight0": ..., ...}` each a view of the same storage; `before`: opcodes run first."""
    def unicode(text):
        data = text.encode()
        return b"X" + len(data).to_bytes(4, "little") + data

    def ints(values):
        return b"(" + b"".join(b"K" + bytes([value]) if value < 256 else b"J" + value.to_bytes(4, "little")
                               for value in values) + b"t"

    def tensor(name):
        return (unicode(name) + b"ctorch._utils\n_rebuild_tensor_v2\n((" + unicode("storage")
                + b"ctorch\nFloatStorage\n" + unicode("0") + unicode("cpu") + b"J" + numel.to_bytes(4, "little")
                + b"tQK\x00" + ints(size) + ints(stride) + b"\x89ccollections\nOrderedDict\n)RtR")

    names = ["weight"] if entries == 1 else [f"weight{index}" for index in range(entries)]
    return b"\x80\x02" + before + b"}(" + b"".join(tensor(name) for name in names) + b"u."


#: A pickle that, before its state dict, sets `name` of the FloatStorage it is given (BUILD), as if to make every
#: float storage of a later file decode as bfloat16.
RETYPE_FLOAT = b"ctorch\nFloatStorage\n}X\x04\x00\x00\x00nameX\x0f\x00\x00\x00BFloat16Storagesb0"


def test_build_on_a_stand_in_is_refused_and_leaves_later_files_as_they_are(tmp_path):
    from kbert.checkpoints.torch_pickle import read_torch_tensors
    from kbert.errors import CheckpointError

    values = np.arange(6, dtype="<f4").tobytes()
    storage_archive(tmp_path / "crafted.pt", handwritten_tensor((2, 3), (3, 1), before=RETYPE_FLOAT), values)
    storage_archive(tmp_path / "trusted.pt", handwritten_tensor((2, 3), (3, 1)), values)
    with pytest.raises(CheckpointError, match=r"crafted.pt: its pickle sets the state of torch.FloatStorage "
                                              r"\(BUILD\), which no saved tensor does"):
        read_torch_tensors(tmp_path / "crafted.pt")
    np.testing.assert_array_equal(read_torch_tensors(tmp_path / "trusted.pt")["weight"], np.arange(6).reshape(2, 3))


def test_zero_strides_that_would_make_a_large_array_of_a_small_storage_are_refused(tmp_path):
    from kbert.checkpoints.torch_pickle import read_torch_tensors
    from kbert.errors import CheckpointError

    storage_archive(tmp_path / "bomb.pt", handwritten_tensor((1000, 1000), (0, 0)), np.zeros(6, "<f4").tobytes())
    with pytest.raises(CheckpointError, match=r"bomb.pt: a tensor of size \(1000, 1000\) and strides \(0, 0\) holds "
                                              "1000000 elements, more than its storage's 6"):
        read_torch_tensors(tmp_path / "bomb.pt")


def test_a_storage_is_checked_against_its_declared_size_and_inflation_before_it_is_read(tmp_path, monkeypatch):
    from kbert.checkpoints.torch_pickle import read_torch_tensors
    from kbert.errors import CheckpointError

    inflated = []
    monkeypatch.setattr(zipfile.ZipFile, "read", lambda self, name, *args: inflated.append(name))
    zeros = np.zeros(4 << 20, "<f4").tobytes()  # 16 MiB that deflate to about 16 kB
    with zipfile.ZipFile(tmp_path / "declared.pt", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("head/data.pkl", handwritten_tensor((2, 3), (3, 1)))
        archive.writestr("head/data/0", zeros)
    with pytest.raises(CheckpointError, match=r"declared.pt: storage '0' holds 16777216 bytes where the pickle "
                                              r"declares 6 elements of torch.FloatStorage \(24 bytes\)"):
        read_torch_tensors(tmp_path / "declared.pt")
    with zipfile.ZipFile(tmp_path / "deflated.pt", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("head/data.pkl", handwritten_tensor((4 << 20,), (1,), numel=4 << 20))
        archive.writestr("head/data/0", zeros)
    with pytest.raises(CheckpointError, match=r"deflated.pt: storage '0' inflates \d+ bytes to 16777216, past 64 "
                                              "times .* a compression bomb, not read"):
        read_torch_tensors(tmp_path / "deflated.pt")
    assert inflated == []


def test_a_storage_many_tensors_refer_to_is_read_once(tmp_path, monkeypatch):
    from kbert.checkpoints.torch_pickle import read_torch_tensors

    storage_archive(tmp_path / "shared.pt", handwritten_tensor((2, 3), (3, 1), entries=300),
                    np.arange(6, dtype="<f4").tobytes())
    reads, read = [], zipfile.ZipFile.read
    monkeypatch.setattr(zipfile.ZipFile, "read", lambda self, name, *args: reads.append(name) or read(self, name, *args))
    tensors = read_torch_tensors(tmp_path / "shared.pt")
    assert len(tensors) == 300 and reads.count("head/data/0") == 1
    np.testing.assert_array_equal(tensors["weight299"], np.arange(6).reshape(2, 3))


@pytest.mark.parametrize("damage, expected", [
    ("cut", r"cut.pt: not a readable torch.save archive \(\w+: "),
    ("crc", r"crc.pt: not a readable torch.save archive \(BadZipFile: Bad CRC-32"),
    ("nested", r"nested.pt: a persistent id a tuple of 1 \(tuple\); expected a tensor storage"),
    ("not_a_storage", r"not_a_storage.pt: a tensor rebuilt from str, size tuple and strides tuple: expected a "
                      "storage"),
    ("huge_number", r"huge_number.pt: a tensor of size \(a number of \d+ bits,\) and strides \(1,\) reaches"),
    ("encrypted", r"encrypted.pt: not a readable torch.save archive \(RuntimeError: File 'head/data.pkl' is encrypted"),
    ("deflate64", r"deflate64.pt: not a readable torch.save archive \(NotImplementedError: That compression method"),
])
def test_damaged_or_crafted_archives_are_one_line_errors_naming_the_file(tmp_path, damage, expected):
    from kbert.checkpoints.torch_pickle import read_torch_tensors
    from kbert.errors import CheckpointError

    values = np.arange(6, dtype="<f4").tobytes()
    path = tmp_path / f"{damage}.pt"
    if damage in ("cut", "crc"):
        storage_archive(path, handwritten_tensor((2, 3), (3, 1)), values)
        data = path.read_bytes()
        index = data.index(values)
        path.write_bytes(data[:index] + data[index + 8:] if damage == "cut" else
                         data[:index] + b"\xff" * 4 + data[index + 4:])
    elif damage in ("encrypted", "deflate64"):  # the first member's headers marked so (zipfile writes neither)
        storage_archive(path, handwritten_tensor((2, 3), (3, 1)), values)
        data = bytearray(path.read_bytes())
        local, central = data.index(b"PK\x03\x04"), data.index(b"PK\x01\x02")
        if damage == "encrypted":  # bit 0 of the general purpose flags
            data[local + 6] |= 1
            data[central + 8] |= 1
        else:  # compression method 9
            data[local + 8:local + 10] = data[central + 10:central + 12] = (9).to_bytes(2, "little")
        path.write_bytes(bytes(data))
    elif damage == "nested":  # a persistent id nested 100,000 deep: its repr alone would recurse past Python's limit
        storage_archive(path, b"\x80\x02" + b"(" * 100_000 + b")" + b"\x85" * 100_000 + b"Q.", values)
    elif damage == "not_a_storage":
        storage_archive(path, b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(X\x01\x00\x00\x00sK\x00))tR.", values)
    else:
        huge = b"(I" + str(10 ** 4000).encode() + b"\nt"
        storage_archive(path, handwritten_tensor((7,), (1,)).replace(b"(K\x07t", huge), values)
    with pytest.raises(CheckpointError, match=expected):
        read_torch_tensors(path)


def test_an_old_pickle_that_is_not_a_zip_is_refused(tmp_path):
    from kbert.checkpoints.torch_pickle import read_torch_tensors
    from kbert.errors import CheckpointError

    (tmp_path / "old.pt").write_bytes(pickle.dumps({"weight": [1.0]}))
    with pytest.raises(CheckpointError, match="old.pt: not a zip archive"):
        read_torch_tensors(tmp_path / "old.pt")


@pytest.mark.parity
def test_tensors_torch_saves_read_back_equal(tmp_path):
    torch = pytest.importorskip("torch", reason="pip install '.[parity]' (with CPU torch) for the parity tests")
    from kbert.checkpoints.torch_pickle import read_torch_tensors

    torch.manual_seed(0)
    tensors = {"float": torch.randn(3, 5), "half": torch.randn(4, 2).half(), "bfloat": torch.randn(7).bfloat16(),
               "long": torch.arange(10).reshape(2, 5), "view": torch.randn(6, 4).t()[1:3], "scalar": torch.tensor(2.5)}
    torch.save(tensors, tmp_path / "tensors.pt")
    read = read_torch_tensors(tmp_path / "tensors.pt")
    for name, tensor in tensors.items():
        np.testing.assert_array_equal(read[name], tensor.float().numpy() if name == "bfloat" else tensor.numpy(),
                                      err_msg=name)
    linear = torch.nn.Linear(8, 1)
    torch.save(linear.state_dict(), tmp_path / "sparse_linear.pt")
    read = read_torch_tensors(tmp_path / "sparse_linear.pt")
    assert set(read) == {"weight", "bias"}
    np.testing.assert_array_equal(read["weight"], linear.weight.detach().numpy())
