"""Layer tests for the layers of RoFormer-v2, GPT-2 and T5: T5's relative position bias and its attention,
the RMS norm, the gated feed-forward, the output scale, RoFormer-v2's initializer, and the conditional
layer norm of `layer_norm_cond`, and the Dropout that ends the padding mask in a Hugging Face T5 decoder
(values against NumPy written from the papers, masks, get_config, .keras with safe_mode)."""

import math

import numpy as np
import pytest

import keras
from kbert.layers import (DepthScaledTruncatedNormal, FeedForward, LogitSoftCap, MultiHeadSelfAttention,
                          RMSNormalization, Scale, TokenScore,
                          T5RelativePositionBias, UnmaskingDropout, ZeroingDropout)

IDS = np.array([[5, 6, 7, 8, 0, 0], [9, 4, 0, 0, 0, 0]])  # id 0 is padding


def t5_bucket(distance, bidirectional, num_buckets=32, max_distance=128):
    """T5's bucket of one distance (key − query), from the T5 paper's description and Mesh TF."""
    n, bucket = -distance, 0
    if bidirectional:
        num_buckets //= 2
        bucket = num_buckets if n < 0 else 0
        n = abs(n)
    else:
        n = max(n, 0)
    exact = num_buckets // 2
    if n < exact:
        return bucket + n
    far = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact))
    return bucket + min(far, num_buckets - 1)


def round_trip(model, path):
    model.save(path)
    return keras.saving.load_model(path, safe_mode=True)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_relative_position_bias_buckets_and_contract(bidirectional, tmp_path):
    layer = T5RelativePositionBias(32, num_heads=3, bidirectional=bidirectional, embeddings_initializer="random_normal")
    queries, keys = keras.ops.zeros((1, 5, 8)), keras.ops.zeros((1, 300, 8))
    bias = keras.ops.convert_to_numpy(layer([queries, keys]))
    assert bias.shape == (5, 300, 3)
    table = keras.ops.convert_to_numpy(layer.embeddings)
    expected = np.array([[table[t5_bucket(k - q, bidirectional)] for k in range(300)] for q in range(5)])
    np.testing.assert_array_equal(bias, expected)
    assert layer.compute_mask([queries, keys], [None, None]) is None
    clone = T5RelativePositionBias.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


def t5_attention_model():
    keras.utils.set_random_seed(3)
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)
    bias = T5RelativePositionBias(32, num_heads=2, embeddings_initializer="random_normal", name="bias")(
        [hidden, hidden])
    attention = MultiHeadSelfAttention(2, 4, position_encoding="t5_relative", use_bias=False, scale=False,
                                       name="attention")
    return keras.Model(tokens, attention([hidden, hidden, hidden, bias]))


def test_t5_attention_adds_the_bias_unscaled_without_biases_and_round_trips(tmp_path):
    model = t5_attention_model()
    layer = model.get_layer("attention")
    assert [weight.path.split("/", 1)[1] for weight in layer.weights] == [
        "query/kernel", "key/kernel", "value/kernel", "output/kernel"]
    x = keras.ops.convert_to_numpy(model.layers[1](IDS))
    q, k, v = (x @ keras.ops.convert_to_numpy(dense.kernel) for dense in (layer.query, layer.key, layer.value))
    q, k, v = (t.reshape(2, 6, 2, 4) for t in (q, k, v))
    table = keras.ops.convert_to_numpy(model.get_layer("bias").embeddings)
    bias = np.array([[table[t5_bucket(j - i, True)] for j in range(6)] for i in range(6)])  # [q, k, h]
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) + bias.transpose(2, 0, 1)[None]
    scores = np.where((IDS == 0)[:, None, None, :], -1e9, scores)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    expected = np.einsum("bhqk,bkhd->bqhd", probs, v).reshape(2, 6, 8) @ keras.ops.convert_to_numpy(layer.output_dense.kernel)
    np.testing.assert_allclose(model.predict(IDS, verbose=0), expected, atol=1e-5)
    loaded = round_trip(model, tmp_path / "t5_attention.keras")
    np.testing.assert_array_equal(loaded.predict(IDS, verbose=0), model.predict(IDS, verbose=0))


@pytest.mark.parametrize("scale, unit_offset", [(True, False), (False, False), (True, True)])
def test_rms_normalization_values_mask_and_round_trip(scale, unit_offset, tmp_path):
    """T5's norm (times the scale), RoFormer-v2's (no weights), Gemma's (times 1 + the scale, which starts at 0)."""
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)
    norm = RMSNormalization(epsilon=1e-6, scale=scale, unit_offset=unit_offset, name="norm")
    normed = norm(hidden)
    assert normed._keras_mask is not None  # the padding mask passes through
    model = keras.Model(tokens, normed)
    if unit_offset:
        assert np.all(keras.ops.convert_to_numpy(norm.gamma) == 0)
    if scale:
        norm.gamma.assign(np.linspace(0.5, 2.0, 8))
    assert model.count_params() == 50 * 8 + (8 if scale else 0)
    x = keras.ops.convert_to_numpy(model.layers[1](IDS))
    factor = np.linspace(0.5, 2.0, 8) + unit_offset if scale else 1
    expected = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6) * factor
    np.testing.assert_allclose(model.predict(IDS, verbose=0), expected, rtol=1e-5)
    loaded = round_trip(model, tmp_path / "norm.keras")
    np.testing.assert_array_equal(loaded.predict(IDS, verbose=0), model.predict(IDS, verbose=0))


def test_gated_feed_forward_is_a_gated_linear_unit_and_round_trips(tmp_path):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((None, 4))
    ffn = FeedForward(6, activation=["gelu", "linear"], use_bias=False, name="ffn")
    model = keras.Model(inputs, ffn(inputs))
    assert ffn.get_config()["activation"] == ["gelu", "linear"] and model.count_params() == 3 * 4 * 6
    x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype("float32")
    inner = x @ keras.ops.convert_to_numpy(ffn.intermediate.kernel)
    gelu = 0.5 * inner * (1 + np.vectorize(math.erf)(inner / math.sqrt(2)))
    expected = (gelu * (x @ keras.ops.convert_to_numpy(ffn.gate.kernel))) @ keras.ops.convert_to_numpy(ffn.output_dense.kernel)
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-5)
    loaded = round_trip(model, tmp_path / "ffn.keras")
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    with pytest.raises(ValueError, match="one activation or two"):
        FeedForward(6, activation=["gelu", "linear", "relu"])


def test_scale_multiplies_keeps_the_mask_and_round_trips(tmp_path):
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)
    scaled = Scale(0.25)(hidden)
    assert scaled._keras_mask is not None
    model = keras.Model(tokens, scaled)
    np.testing.assert_allclose(model.predict(IDS, verbose=0), keras.ops.convert_to_numpy(model.layers[1](IDS)) * 0.25)
    loaded = round_trip(model, tmp_path / "scale.keras")
    np.testing.assert_array_equal(loaded.predict(IDS, verbose=0), model.predict(IDS, verbose=0))


@pytest.mark.parametrize("false_token_id", [7, None])
def test_token_score_is_a_logit_difference_and_round_trips(false_token_id, tmp_path):
    """sentence-transformers' LogitScore: logit(true) − logit(false) of each row's vocabulary logits, the mask
    ended (one score a row)."""
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)
    score = TokenScore(3, false_token_id)(hidden)
    assert getattr(score, "_keras_mask", None) is None and TokenScore(3).compute_output_shape((2, 5, 8)) == (2, 5, 1)
    model = keras.Model(tokens, score)
    x = keras.ops.convert_to_numpy(model.layers[1](IDS))
    expected = x[..., 3:4] - (x[..., 7:8] if false_token_id is not None else 0)
    np.testing.assert_allclose(model.predict(IDS, verbose=0), expected, atol=1e-6)
    loaded = round_trip(model, tmp_path / "score.keras")
    np.testing.assert_array_equal(loaded.predict(IDS, verbose=0), model.predict(IDS, verbose=0))


def test_logit_soft_cap_bounds_keeps_the_mask_and_round_trips(tmp_path):
    """Gemma's final_logit_softcapping: cap · tanh(x / cap), near x for small logits, within ±cap for large."""
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True, embeddings_initializer="random_normal")(tokens)
    capped = LogitSoftCap(0.01)(Scale(100.0)(hidden))
    assert capped._keras_mask is not None
    model = keras.Model(tokens, capped)
    x = keras.ops.convert_to_numpy(model.layers[1](IDS)) * 100
    np.testing.assert_allclose(model.predict(IDS, verbose=0), 0.01 * np.tanh(x / 0.01), atol=1e-6)
    assert np.abs(model.predict(IDS, verbose=0)).max() <= 0.01
    loaded = round_trip(model, tmp_path / "cap.keras")
    np.testing.assert_array_equal(loaded.predict(IDS, verbose=0), model.predict(IDS, verbose=0))


def test_zeroing_dropout_zeroes_hidden_positions_keeps_the_mask_and_round_trips(tmp_path):
    """DeBERTa's embeddings: a hidden position's vector is zeros after it, the mask goes on to the next layer,
    and a real position is what Keras's Dropout gives (out of training: itself)."""
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)
    zeroed = ZeroingDropout(0.5, name="zeroing")(hidden)
    assert zeroed._keras_mask is not None
    model = keras.Model(tokens, [zeroed, MultiHeadSelfAttention(num_heads=2, head_size=4, output_dim=8)([zeroed] * 3)])
    vectors, attended = model.predict(IDS, verbose=0)
    assert vectors.shape == attended.shape == (2, 6, 8)
    assert not vectors[IDS == 0].any() and (vectors[IDS > 0] != 0).all()
    plain = keras.Model(tokens, hidden).predict(IDS, verbose=0)
    np.testing.assert_array_equal(vectors[IDS > 0], plain[IDS > 0])
    longer = model.predict(np.pad(IDS, [(0, 0), (0, 2)]), verbose=0)[1]  # padding appended: real rows the same
    np.testing.assert_allclose(longer[:, :6][IDS > 0], attended[IDS > 0], atol=1e-6)
    layer = model.get_layer("zeroing")
    assert type(layer).from_config(layer.get_config()).get_config() == layer.get_config()
    loaded = round_trip(model, tmp_path / "zeroing.keras")
    assert isinstance(loaded.get_layer("zeroing"), ZeroingDropout)
    for a, b in zip(loaded.predict(IDS, verbose=0), (vectors, attended)):
        np.testing.assert_array_equal(a, b)


def test_unmasking_dropout_ends_the_mask_and_round_trips(tmp_path):
    """Every key is attended to after it (id 0 included); Keras's Dropout would pass the mask on."""
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)
    attention = MultiHeadSelfAttention(num_heads=2, head_size=4, output_dim=8, name="attention")
    unmasked = UnmaskingDropout(0.5, name="unmasking")(hidden)
    model = keras.Model(tokens, [attention([unmasked] * 3), attention([keras.layers.Dropout(0.5)(hidden)] * 3)])
    assert model.get_layer("unmasking").get_config()["rate"] == 0.5
    open_keys, masked_keys = model.predict(IDS, verbose=0)
    assert open_keys.shape == masked_keys.shape == (2, 6, 8)
    # The rows differ only where a padded key was hidden from them: every row of the second sequence.
    assert not np.allclose(open_keys[1], masked_keys[1])
    np.testing.assert_allclose(model.predict(IDS[:, :4] + 1, verbose=0)[0], model.predict(IDS[:, :4] + 1, verbose=0)[1],
                               atol=1e-6)
    loaded = round_trip(model, tmp_path / "unmasking.keras")
    assert isinstance(loaded.get_layer("unmasking"), UnmaskingDropout)
    for a, b in zip(loaded.predict(IDS, verbose=0), (open_keys, masked_keys)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shape, fan", [((512, 128), 512), ((20000, 64), 64), ((2, 64), 64)])
def test_roformer_v2_initializer_scales_with_fan_in_and_depth(shape, fan):
    initializer = DepthScaledTruncatedNormal(num_layers=4, seed=1)
    values = keras.ops.convert_to_numpy(initializer(shape))
    # A normal truncated at 2σ has std 0.87962 σ; 1.13684723 undoes it.
    assert abs(values.std() - 1.13684723 * 0.87962 / math.sqrt(fan) / 2) < 0.1 / math.sqrt(fan) / 2
    # Keras on torch redraws a value 4 times at most: a few in a million may lie beyond 2σ.
    assert np.mean(np.abs(values) > 2 * 1.13684723 / math.sqrt(fan) / 2 + 1e-6) <= 1e-5
    clone = DepthScaledTruncatedNormal.from_config(initializer.get_config())
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(clone(shape)), values)


@pytest.mark.parametrize("hidden_units", [None, 6])
def test_conditional_layer_normalization_values_mask_and_round_trip(hidden_units, tmp_path):
    """bert4keras's conditional layer norm: (x − μ)/σ · (γ + c·W_γ) + (β + c·W_β), c optionally projected."""
    from kbert.layers import ConditionalLayerNormalization

    keras.utils.set_random_seed(0)
    tokens, classes = keras.Input((None,), dtype="int32"), keras.Input((1,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)
    condition = keras.layers.Flatten()(keras.layers.Embedding(3, 4)(classes))
    norm = ConditionalLayerNormalization(epsilon=1e-12, hidden_units=hidden_units, hidden_activation="tanh",
                                         name="norm")
    normed = norm([hidden, condition])
    assert normed._keras_mask is not None  # the padding mask of x passes through
    model = keras.Model([tokens, classes], normed)
    width = hidden_units or 4
    assert norm.count_params() == 16 + (4 * hidden_units if hidden_units else 0) + 2 * width * 8
    labels = np.array([[0], [2]])
    x = keras.Model(tokens, hidden).predict(IDS, verbose=0)
    standardized = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)
    # W_γ and W_β start at zero: a plain layer norm, whatever the condition.
    np.testing.assert_allclose(model.predict([IDS, labels], verbose=0), standardized, atol=1e-5)
    rng = np.random.default_rng(1)
    for weight in norm.weights:
        weight.assign(rng.normal(size=weight.shape))
    c = keras.Model(classes, condition).predict(labels, verbose=0)
    if hidden_units:
        c = np.tanh(c @ keras.ops.convert_to_numpy(norm.hidden_dense.kernel))
    gamma = keras.ops.convert_to_numpy(norm.gamma) + c @ keras.ops.convert_to_numpy(norm.gamma_dense.kernel)
    beta = keras.ops.convert_to_numpy(norm.beta) + c @ keras.ops.convert_to_numpy(norm.beta_dense.kernel)
    expected = standardized * gamma[:, None] + beta[:, None]
    np.testing.assert_allclose(model.predict([IDS, labels], verbose=0), expected, atol=1e-4)
    assert norm.get_config()["hidden_units"] == hidden_units
    loaded = round_trip(model, tmp_path / "conditional.keras")
    np.testing.assert_array_equal(loaded.predict([IDS, labels], verbose=0), model.predict([IDS, labels], verbose=0))


def test_attention_returns_its_scores_and_adds_the_previous_layers(tmp_path):
    """RealFormer (bert4keras's residual_attention_scores): softmax(own scaled scores + previous scores)."""
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)
    first = MultiHeadSelfAttention(num_heads=2, head_size=4, return_attention_scores=True, name="first")
    second = MultiHeadSelfAttention(num_heads=2, head_size=4, return_attention_scores=True, name="second")
    output, scores = first([hidden, hidden, hidden])
    assert output._keras_mask is not None and tuple(scores.shape) == (None, 2, None, None)
    final, final_scores = second([output, output, output, scores])
    model = keras.Model(tokens, [final, scores, final_scores])
    x = keras.Model(tokens, output).predict(IDS, verbose=0)
    _, previous, own = model.predict(IDS, verbose=0)

    def heads(kernel, bias):
        return (x @ kernel + bias).reshape(*x.shape[:2], 2, 4)

    q = heads(keras.ops.convert_to_numpy(second.query.kernel), keras.ops.convert_to_numpy(second.query.bias))
    k = heads(keras.ops.convert_to_numpy(second.key.kernel), keras.ops.convert_to_numpy(second.key.bias))
    v = heads(keras.ops.convert_to_numpy(second.value.kernel), keras.ops.convert_to_numpy(second.value.bias))
    expected_scores = np.einsum("bqhd,bkhd->bhqk", q, k) / 2.0  # √head_size
    np.testing.assert_allclose(own, expected_scores, rtol=1e-4, atol=1e-5)  # its own, before the residual
    logits = np.where((IDS != 0)[:, None, None, :], expected_scores + previous, -1e9)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = np.einsum("bhqk,bkhd->bqhd", probs, v).reshape(*x.shape[:2], 8)
    expected = context @ keras.ops.convert_to_numpy(second.output_dense.kernel) + keras.ops.convert_to_numpy(second.output_dense.bias)
    np.testing.assert_allclose(model.predict(IDS, verbose=0)[0], expected, rtol=1e-4, atol=1e-5)
    assert second.get_config()["return_attention_scores"] is True
    loaded = round_trip(model, tmp_path / "realformer.keras")
    for a, b in zip(loaded.predict(IDS, verbose=0), model.predict(IDS, verbose=0)):
        np.testing.assert_array_equal(a, b)
