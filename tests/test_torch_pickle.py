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


def handwritten_tensor(size, stride) -> bytes:
    """The pickle torch.save writes for `{"weight": tensor}` of a 6-float storage, opcode by opcode (protocol 2)."""
    def unicode(text):
        data = text.encode()
        return b"X" + len(data).to_bytes(4, "little") + data

    def ints(values):
        return b"(" + b"".join(b"K" + bytes([value]) if value < 256 else b"M" + value.to_bytes(2, "little")
                               for value in values) + b"t"

    return (b"\x80\x02}(" + unicode("weight") + b"ctorch._utils\n_rebuild_tensor_v2\n(("
            + unicode("storage") + b"ctorch\nFloatStorage\n" + unicode("0") + unicode("cpu") + b"K\x06tQK\x00"
            + ints(size) + ints(stride) + b"\x89ccollections\nOrderedDict\n)RtRu.")


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
