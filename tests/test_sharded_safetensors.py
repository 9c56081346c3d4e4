"""Sharded Hugging Face safetensors written by kbert (`save_hf_weights(max_shard_size=)`, `kbert convert
--max-shard-size`): transformers' layout and index, read back exactly by kbert and by transformers."""

import json

import numpy as np
import pytest

from conftest import CONFIGS, kbert_in_process
from kbert import build_transformer_model, load_hf_weights, save_hf_weights
from kbert.checkpoints.hf import INDEX_NAME, WEIGHTS_NAME, parse_size
from kbert.errors import CheckpointError

SHARD = 20_000  # bytes: bert_tiny's token table alone in its shard, the rest in several


@pytest.fixture(scope="module")
def bert():
    return build_transformer_model(str(CONFIGS / "bert_tiny.json"))


def tensor_bytes(directory) -> dict:
    from safetensors.numpy import load_file

    values = {}
    for path in sorted(directory.glob("*.safetensors")):
        values.update({name: (path.name, value) for name, value in load_file(path).items()})
    return values


def test_shards_follow_transformers_layout_and_load_back_exactly(bert, tmp_path):
    index_path = save_hf_weights(bert, tmp_path / "sharded", max_shard_size=SHARD)
    single_path = save_hf_weights(bert, tmp_path / "single")
    assert index_path.endswith(INDEX_NAME) and single_path.endswith(WEIGHTS_NAME)
    index = json.loads((tmp_path / "sharded" / INDEX_NAME).read_text())
    stored = tensor_bytes(tmp_path / "sharded")
    shards = sorted({name for name, _ in stored.values()})
    assert len(shards) > 3 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert index["weight_map"] == {name: shard for name, (shard, _) in stored.items()}
    assert index["metadata"]["total_size"] == sum(value.nbytes for _, value in stored.values())
    for shard in shards:  # each at most the limit, unless one tensor alone is larger
        sizes = [value.nbytes for name, value in stored.values() if name == shard]
        assert sum(sizes) <= SHARD or len(sizes) == 1
    single = tensor_bytes(tmp_path / "single")
    assert sorted(single) == sorted(stored)
    for name, (_, value) in single.items():
        np.testing.assert_array_equal(stored[name][1], value)
    copy = build_transformer_model(str(CONFIGS / "bert_tiny.json"))
    report = load_hf_weights(copy, tmp_path / "sharded")
    assert len(report.loaded) == len(bert.weights)
    for mine, theirs in zip(bert.weights, copy.weights):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))


def test_a_save_in_the_other_layout_leaves_no_stale_files(bert, tmp_path):
    save_hf_weights(bert, tmp_path, max_shard_size=SHARD)
    save_hf_weights(bert, tmp_path)  # a reader would otherwise meet both the file and the shards
    assert sorted(path.name for path in tmp_path.iterdir()) == ["config.json", WEIGHTS_NAME]
    save_hf_weights(bert, tmp_path, max_shard_size=SHARD)
    names = sorted(path.name for path in tmp_path.iterdir())
    assert WEIGHTS_NAME not in names and INDEX_NAME in names and len(names) > 5  # config, index, 4+ shards


def test_a_model_under_the_limit_is_one_file(bert, tmp_path):
    assert save_hf_weights(bert, tmp_path, max_shard_size=parse_size("1GB")).endswith(WEIGHTS_NAME)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["config.json", WEIGHTS_NAME]


def test_shards_need_a_directory(bert, tmp_path):
    with pytest.raises(CheckpointError, match="a sharded checkpoint is several files and an index; give a directory"):
        save_hf_weights(bert, tmp_path / "weights.safetensors", max_shard_size=SHARD)
    assert list(tmp_path.iterdir()) == []


def test_parse_size():
    assert parse_size("5GB") == 5 * 10 ** 9 and parse_size("2GiB") == 2 ** 31 and parse_size("0.5MB") == 500_000
    for bad in ("", "GB", "5 parsecs", "-1GB", "0"):
        with pytest.raises(CheckpointError, match="expected a size such as 5GB"):
            parse_size(bad)


def test_kbert_convert_writes_shards(tmp_path, tiny_checkpoint_dir):
    result = kbert_in_process("convert", str(tiny_checkpoint_dir), str(tmp_path / "out"), "--max-shard-size", "1KB")
    assert result.returncode == 0, result.stderr
    assert f"-> {tmp_path / 'out' / INDEX_NAME}" in result.stdout
    names = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert {"config.json", "vocab.txt", INDEX_NAME} < set(names) and WEIGHTS_NAME not in names
    bad = kbert_in_process("convert", str(tiny_checkpoint_dir), str(tmp_path / "bad"), "--max-shard-size", "lots")
    assert bad.returncode == 2 and "expected a size such as 5GB" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "bad").exists()


@pytest.mark.parity
def test_transformers_loads_kbert_shards(bert, tmp_path):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    save_hf_weights(bert, tmp_path / "sharded", max_shard_size=SHARD)
    save_hf_weights(bert, tmp_path / "single")
    tokens = torch.from_numpy(np.random.default_rng(0).integers(1, 100, size=(2, 12)))
    outputs = []
    for name in ("sharded", "single"):
        model = transformers.BertModel.from_pretrained(tmp_path / name, add_pooling_layer=False).eval()
        with torch.no_grad():
            outputs.append(model(input_ids=tokens).last_hidden_state.numpy())
    np.testing.assert_array_equal(outputs[0], outputs[1])
    kbert_output = np.asarray(bert.predict_on_batch([tokens.numpy(), np.zeros_like(tokens.numpy())]))
    np.testing.assert_allclose(outputs[0], kbert_output, atol=1e-4)


@pytest.mark.parametrize("shape, elements", [((7, 3, 2), 5), ((9, 4), 8), ((9, 4), 36), ((5,), 2), ((), 1)])
def test_a_tensor_read_in_blocks_is_the_tensor(tmp_path, shape, elements):
    """`read_in_blocks` (a block of rows a map, so a large table stands once in memory): the stored values, in
    their own dtype (bfloat16 too), whatever the block size against the rows; a scalar as itself."""
    import ml_dtypes
    from safetensors.numpy import save_file

    from kbert.checkpoints.hf import read_in_blocks

    rng = np.random.default_rng(0)
    tensors = {"a": rng.normal(size=shape).astype(np.float32),
               "b": rng.normal(size=shape).astype(ml_dtypes.bfloat16)}
    save_file(tensors, str(tmp_path / "t.safetensors"))
    for name, value in tensors.items():
        read = read_in_blocks(str(tmp_path / "t.safetensors"), name, elements)
        assert read.dtype == value.dtype and read.shape == value.shape
        assert read.tobytes() == value.tobytes()
