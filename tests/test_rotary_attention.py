"""Whole-row rotary attention a block of queries at a time (TensorFlow and JAX): the same outputs as all at once,
with padding, for rows shorter than, as long as and longer than a block; the layer's contract with blocks.
Run on JAX too (.ci/run)."""

import keras
import numpy as np
import pytest

from kbert.layers import RotarySelfAttention
from kbert.layers.rotary_attention import (apply_rotary_half, query_blocked_attention, rotary_cos_sin,
                                          whole_query_blocks, windowed_attention)
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


# --- a decoder's attention (Llama's, Qwen's, Mistral's) -----------------------------------------------------------

def decoder_layer(**changes):
    settings = dict(num_key_value_heads=1, fused_qkv=False, use_bias=True, output_bias=False, causal=True,
                    causal_window=3, qk_norm_epsilon=1e-6,
                    rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4})
    return RotarySelfAttention(2, 4, **{**settings, **changes})


def test_layer_contract_of_a_decoder_layer(tmp_path):
    """Causal, a window of 3 keys, norms on the queries and keys, biases on q, k, v alone, yarn's frequencies."""
    layer = decoder_layer()
    assert_layer_contract(layer, tmp_path)
    assert layer.output_dense.bias is None and layer.query.bias is not None
    assert [weight.shape for weight in layer.query_norm.weights] == [(4,)]


@pytest.mark.parametrize("window", [None, 3])
def test_a_left_padded_row_gives_its_outputs_alone(window):
    """Padding before a text (Qwen3-Embedding pads on the left) hides no real token and moves no output: the
    rotation is relative, so the shifted positions change nothing; a padding query stays finite."""
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)
    model = keras.Model(tokens, decoder_layer(causal_window=window)(hidden))
    alone = model.predict(np.array([[5, 6, 7, 8, 9]]), verbose=0)
    padded = model.predict(np.array([[0, 0, 0, 5, 6, 7, 8, 9]]), verbose=0)
    assert np.isfinite(padded).all()
    np.testing.assert_allclose(padded[:, 3:], alone, atol=1e-5)


def test_a_causal_position_reads_no_later_token():
    layer = decoder_layer(causal_window=None)
    x = keras.random.normal((1, 6, 8), seed=3)
    changed = keras.ops.concatenate([x[:, :4], keras.random.normal((1, 2, 8), seed=4)], axis=1)
    first, again = (keras.ops.convert_to_numpy(layer(row)) for row in (x, changed))
    np.testing.assert_array_equal(first[:, :4], again[:, :4])
    assert np.abs(first[:, 4:] - again[:, 4:]).max() > 1e-3


# --- Gemma 3's attention ------------------------------------------------------------------------------------------

def test_layer_contract_of_a_gemma_layer(tmp_path):
    """Scores scaled by query_pre_attn_scalar, norms on the queries and keys times 1 + w (starting at 0), a
    bidirectional window."""
    layer = RotarySelfAttention(2, 4, num_key_value_heads=1, fused_qkv=False, window=2, qk_norm_epsilon=1e-6,
                                qk_norm_unit_offset=True, attention_scale=0.3)
    assert_layer_contract(layer, tmp_path)
    assert layer.query_norm.unit_offset and layer.get_config()["attention_scale"] == 0.3


def test_the_scores_scale_is_the_layers():
    """attention_scale in place of 1 / √head_size: the same layer with its queries scaled by the ratio."""
    x = keras.random.normal((2, 5, 8), seed=1)
    plain = RotarySelfAttention(2, 4, fused_qkv=False)
    scaled = RotarySelfAttention(2, 4, fused_qkv=False, attention_scale=0.3)
    plain(x), scaled(x)
    scaled.set_weights(plain.get_weights())
    plain.query.kernel.assign(plain.query.kernel * 0.3 * 2.0)  # 1 / √4 = 0.5
    np.testing.assert_allclose(keras.ops.convert_to_numpy(scaled(x)), keras.ops.convert_to_numpy(plain(x)), atol=1e-5)


@pytest.mark.parametrize("length", [2, 4, 5, 9])
def test_a_window_over_a_short_row_is_the_windowed_computation(length):
    """A row of at most w + 1 tokens is attended whole (the window holds it); its outputs are those of the blocks,
    with padding, in a traced predict too."""
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)
    layer = RotarySelfAttention(2, 4, window=3, fused_qkv=False, attention_scale=0.4)
    model = keras.Model(tokens, layer(hidden))
    ids = np.arange(1, 2 * length + 1).reshape(2, length)
    ids[1, -1] = 0
    x = keras.ops.convert_to_numpy(model.layers[1](ids))
    q, k, v = layer._heads(keras.ops.convert_to_tensor(x), 2, length)
    cos, sin = rotary_cos_sin(length, 4, layer.rope_theta)
    q, k = apply_rotary_half(q, cos, sin), apply_rotary_half(k, cos, sin)
    blocks = windowed_attention(q * 0.4, k, v, keras.ops.convert_to_tensor(ids != 0), 3)
    expected = keras.ops.convert_to_numpy(layer.output_dense(keras.ops.reshape(blocks, (2, length, 8))))
    keep = ids != 0
    np.testing.assert_allclose(model.predict(ids, verbose=0)[keep], expected[keep], atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(ids))[keep], expected[keep], atol=1e-5)
