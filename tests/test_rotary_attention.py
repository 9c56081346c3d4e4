"""Whole-row rotary attention a block of queries at a time (TensorFlow and JAX): the same outputs as all at once,
with padding, for rows shorter than, as long as and longer than a block; the layer's contract with blocks.
Run on JAX too (.ci/run)."""

import keras
import numpy as np
import pytest

from kbert.layers import RotarySelfAttention
from kbert.layers.rotary_attention import query_blocked_attention, whole_query_blocks
from test_modernbert import assert_layer_contract


def full_attention(q, k, v, keep, scale):
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    scores = np.where(keep[:, None, None, :], scores, -1e9)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    return np.einsum("bhqk,bkhd->bqhd", probs / probs.sum(-1, keepdims=True), v)


@pytest.mark.parametrize("length", [1, 3, 4, 5, 11])
def test_query_blocks_are_the_whole_matrix(length):
    """Blocks of at most 4 queries: one block, one exactly full, and rows cut into 2 and 3 blocks whose last is
    padded; the second row's last two tokens are padding."""
    rng = np.random.default_rng(length)
    q, k, v = (rng.normal(size=(2, length, 2, 3)).astype(np.float32) for _ in range(3))
    keep = np.ones((2, length), bool)
    keep[1, max(length - 2, 1):] = False
    ours = keras.ops.convert_to_numpy(query_blocked_attention(q, k, v, keep, 4, 0.5))
    assert ours.shape == q.shape
    np.testing.assert_allclose(ours, full_attention(q, k, v, keep, 0.5), atol=1e-5)


def test_a_layer_with_query_blocks_gives_what_it_gives_without():
    """Through the layer, eagerly and in a traced `predict` (where TensorFlow does not know the length), with
    grouped-query heads; `whole_query_blocks` turns the blocks off."""
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)
    layer = RotarySelfAttention(4, 2, num_key_value_heads=2, fused_qkv=False, query_block=3)
    model = keras.Model(tokens, layer(hidden))
    ids = np.array([[5, 6, 7, 8, 9, 10, 11], [8, 9, 10, 11, 0, 0, 0]])
    blocked = model.predict(ids, verbose=0)
    whole_query_blocks(model)
    assert layer.query_block is None
    np.testing.assert_allclose(model.predict(ids, verbose=0), blocked, atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(ids)), blocked, atol=1e-5)


def test_layer_contract_with_query_blocks(tmp_path):
    assert_layer_contract(RotarySelfAttention(2, 4, rope_theta=1000.0, query_block=2), tmp_path)
