"""Layer tests for the families' position layers: NEZHA's relative table, RoFormer's rotary sinusoids,
and the attention that takes them as a fourth input (shapes, masks, get_config, .keras with safe_mode)."""

import numpy as np
import pytest

import keras
from kbert.layers import (
    AttentionMask,
    MultiHeadSelfAttention,
    RelativePositionEmbedding,
    Sinusoidal,
    SinusoidalPositionEmbedding,
    T5RelativePositionBias,
)
from kbert.layers.decoding import DecodingStep

IDS = np.array([[5, 6, 7, 8, 0, 0], [9, 4, 0, 0, 0, 0]])  # id 0 is padding


def attention_model(position_encoding):
    """Embedding (masked at id 0) -> positions -> attention with a fourth input."""
    keras.utils.set_random_seed(1)
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)
    if position_encoding == "relative":
        positions = RelativePositionEmbedding(2 * 2 + 1, 4, name="relative")([hidden, hidden])
    else:
        positions = SinusoidalPositionEmbedding(4, name="rotary")(hidden)
    attention = MultiHeadSelfAttention(2, 4, position_encoding=position_encoding, name="attention")
    return keras.Model(tokens, attention([hidden, hidden, hidden, positions]))


def numpy_attention(model, ids, position_encoding):
    """The same attention in NumPy, written from the NEZHA and RoFormer papers."""
    x = keras.ops.convert_to_numpy(model.layers[1](ids))
    layer = model.get_layer("attention")
    q, k, v = (keras.ops.convert_to_numpy(dense(x)).reshape(*x.shape[:2], 2, 4) for dense in (layer.query, layer.key, layer.value))
    n = ids.shape[1]
    if position_encoding == "relative":
        table = keras.ops.convert_to_numpy(model.get_layer("relative").embeddings)
        rel = table[np.clip(np.arange(n)[None] - np.arange(n)[:, None], -2, 2) + 2]  # [q, k, d]
        scores = np.einsum("bqhd,bkhd->bhqk", q, k) + np.einsum("bqhd,qkd->bhqk", q, rel)
    else:
        angles = np.arange(n)[:, None] * 10000.0 ** (-np.arange(2) / 2)[None]  # d=4: frequencies 1, 1/100

        def rotate(t):
            cos, sin = np.repeat(np.cos(angles), 2, -1)[None, :, None], np.repeat(np.sin(angles), 2, -1)[None, :, None]
            pairs = np.stack([-t[..., 1::2], t[..., ::2]], -1).reshape(t.shape)
            return t * cos + pairs * sin

        q, k = rotate(q), rotate(k)
        scores = np.einsum("bqhd,bkhd->bhqk", q, k)
    scores = np.where((ids == 0)[:, None, None, :], -1e9, scores / 2.0)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = np.einsum("bhqk,bkhd->bqhd", probs, v)
    if position_encoding == "relative":
        context = context + np.einsum("bhqk,qkd->bqhd", probs, rel)
    return keras.ops.convert_to_numpy(layer.output_dense(context.reshape(*x.shape[:2], 8).astype("float32")))


@pytest.mark.parametrize("position_encoding", ["relative", "rotary"])
def test_attention_with_positions_matches_numpy_and_round_trips(position_encoding, tmp_path):
    model = attention_model(position_encoding)
    output = model.predict(IDS, verbose=0)
    assert output.shape == (2, 6, 8)
    np.testing.assert_allclose(output, numpy_attention(model, IDS, position_encoding), atol=1e-5)
    # Padded keys get no attention: without the padding, the real rows are the same.
    unpadded = model.predict(IDS[:1, :4], verbose=0)
    np.testing.assert_allclose(unpadded[0], output[0, :4], atol=1e-6)
    attention = model.get_layer("attention")
    assert MultiHeadSelfAttention.from_config(attention.get_config()).get_config() == attention.get_config()
    model.save(tmp_path / "model.keras")
    restored = keras.models.load_model(tmp_path / "model.keras", safe_mode=True)
    np.testing.assert_array_equal(restored.predict(IDS, verbose=0), output)


def test_relative_position_table_is_sinusoidal_clipped_and_untrained():
    layer = RelativePositionEmbedding(2 * 3 + 1, 4)
    x = keras.ops.zeros((1, 5, 8))
    table = keras.ops.convert_to_numpy(layer([x, x]))
    assert table.shape == (5, 5, 4) and layer.trainable_weights == [] and layer.count_params() == 28
    rows = keras.ops.convert_to_numpy(Sinusoidal()((7, 4)))
    np.testing.assert_allclose(rows[1], [np.sin(1), np.cos(1), np.sin(0.01), np.cos(0.01)], atol=1e-6)
    np.testing.assert_array_equal(table[0, 4], rows[6])  # distance +4 clipped to +3 (row 3 + 3)
    np.testing.assert_array_equal(table[4, 0], rows[0])  # distance −4 clipped to −3
    np.testing.assert_array_equal(table[2, 2], rows[3])  # distance 0
    assert layer.compute_mask([x, x], [None, None]) is None
    clone = RelativePositionEmbedding.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config() and not clone.trainable


def test_sinusoidal_position_embedding_contract():
    layer = SinusoidalPositionEmbedding(6)
    x = keras.ops.zeros((3, 5, 8))
    output = keras.ops.convert_to_numpy(layer(x))
    assert output.shape == (1, 5, 6) and layer.count_params() == 0
    np.testing.assert_allclose(output[0, 2, :2], [np.sin(2), np.cos(2)], atol=1e-6)
    assert layer.compute_mask(x, keras.ops.ones((3, 5), "bool")) is None
    assert SinusoidalPositionEmbedding.from_config(layer.get_config()).get_config() == layer.get_config()


def test_unknown_position_encoding_is_an_error():
    with pytest.raises(ValueError, match="position_encoding: expected None or one of relative, rotary"):
        MultiHeadSelfAttention(2, 4, position_encoding="alibi")


@pytest.mark.parametrize("kind", ["lm", "unilm"])
def test_attention_mask_layer_contract(kind, tmp_path):
    """Shapes, the mask rule, get_config, and a model with it through .keras with safe_mode=True."""
    from kbert.layers import AttentionMask

    keras.utils.set_random_seed(2)
    tokens = keras.Input((None,), dtype="int32")
    segments = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)
    allowed = AttentionMask(kind, name="mask")(tokens if kind == "lm" else segments)
    outputs = MultiHeadSelfAttention(2, 4, use_attention_mask=True)([hidden, hidden, hidden, allowed])
    model = keras.Model([tokens, segments], outputs)
    segment_ids = np.array([[0, 0, 1, 1, 0, 0], [0, 1, 0, 0, 0, 0]])
    output = model.predict([IDS, segment_ids], verbose=0)
    mask = keras.Model([tokens, segments], allowed).predict([IDS, segment_ids], verbose=0)
    if kind == "lm":
        assert mask.shape == (1, 1, 6, 6) and (mask[0, 0] == np.tril(np.ones((6, 6), bool))).all()
    else:
        assert mask.shape == (2, 1, 6, 6)
        assert mask[0, 0, 1].tolist() == [True, True, False, False, False, False]  # source: not the target
        assert mask[0, 0, 2].tolist() == [True, True, True, False, False, False]   # target: up to itself
    layer = model.get_layer("mask")
    assert AttentionMask.from_config(layer.get_config()).get_config() == layer.get_config()
    model.save(tmp_path / "model.keras")
    restored = keras.models.load_model(tmp_path / "model.keras", safe_mode=True)
    np.testing.assert_array_equal(restored.predict([IDS, segment_ids], verbose=0), output)


@pytest.mark.parametrize("scale, t5_bias, dtype", [(True, False, "float32"), (False, True, "float32"),
                                                   (True, False, "bfloat16")])
def test_the_fused_attention_is_the_einsum_attention(scale, t5_bias, dtype):
    """`ops.dot_product_attention` (what inference runs on JAX and PyTorch) gives `_attend`'s einsums and
    softmax: with masked keys, a row whose every key is hidden (uniform in both), and T5's biases."""
    from keras import ops

    random = np.random.default_rng(0)
    attention = MultiHeadSelfAttention(3, 4, scale=scale, position_encoding="t5_relative" if t5_bias else None,
                                       dtype=dtype if dtype == "float32" else "mixed_bfloat16")
    x = ops.convert_to_tensor(random.normal(size=(2, 5, 12)), "float32")
    attention([x, x, x] + ([ops.zeros((5, 5, 3))] if t5_bias else []))  # builds it
    q, k, v = (ops.cast(ops.reshape(ops.convert_to_tensor(random.normal(size=(2, 5, 12))), (2, 5, 3, 4)), dtype)
               for _ in range(3))
    hidden = np.zeros((2, 1, 5, 5), bool)
    hidden[0, 0, :, 3:] = True  # padding
    hidden[1, 0, 2, :] = True  # a row with nothing to see
    positions = ops.convert_to_tensor(random.normal(size=(5, 5, 3)), "float32") if t5_bias else None
    einsums, _ = attention._attend(q, k, v, ops.convert_to_tensor(hidden), positions, training=False,
                                   previous_scores=ops.zeros((1, 1, 1, 1), dtype))  # scores passed on: einsums
    fused = attention._fused_attend(q, k, v, ops.convert_to_tensor(hidden), positions)
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(ops.convert_to_numpy(ops.cast(fused, "float32")),
                               ops.convert_to_numpy(ops.cast(einsums, "float32")), atol=tolerance, rtol=tolerance)
    # With an attention mask's empty rows (a T5 decoder started from its padding id), such a row reads nothing.
    hidden = ops.convert_to_tensor(hidden)
    context = ops.convert_to_numpy(ops.cast(attention._fused_attend(q, k, v, hidden, positions, empty_rows=True),
                                            "float32"))
    assert np.isfinite(context).all()
    einsums, _ = attention._attend(q, k, v, hidden, positions, training=False, empty_rows=True,
                                   previous_scores=ops.zeros((1, 1, 1, 1), dtype))
    np.testing.assert_allclose(context, ops.convert_to_numpy(ops.cast(einsums, "float32")), atol=tolerance,
                               rtol=tolerance)


def position_layer(position_encoding):
    if position_encoding == "relative":
        return RelativePositionEmbedding(2 * 2 + 1, 4)
    if position_encoding == "rotary":
        return SinusoidalPositionEmbedding(4)
    return T5RelativePositionBias(8, num_heads=2, bidirectional=False, embeddings_initializer="normal")


@pytest.mark.parametrize("position_encoding", ["relative", "rotary", "t5_relative"])
def test_decoding_steps_give_the_whole_sequences_causal_attention(position_encoding):
    """Token by token through each layer's `call_step` (its own position, the key/value cache the step carries)
    equals the whole sequence under the lm mask, row by row."""
    keras.utils.set_random_seed(2)
    x = keras.random.normal((2, 5, 8))
    positions, mask = position_layer(position_encoding), AttentionMask("lm")
    attention = MultiHeadSelfAttention(2, 4, position_encoding=position_encoding, use_attention_mask=True)
    whole_positions = positions(x) if position_encoding == "rotary" else positions([x, x])
    whole = keras.ops.convert_to_numpy(attention([x, x, x, mask(x[..., 0]), whole_positions]))
    empty = keras.ops.zeros((2, 5, 2, 4))
    caches = [(empty, empty)]
    for position in range(5):
        new = x[:, position:position + 1]
        step = DecodingStep(keras.ops.full((2, 1), position, "int32"),
                            keras.ops.broadcast_to(keras.ops.arange(5) <= position, (2, 1, 5)), caches)
        encoded = positions.call_step(new if position_encoding == "rotary" else [new, new], step)
        output = attention.call_step([new, new, new, mask.call_step(None, step), encoded], step)
        caches = step.caches
        np.testing.assert_allclose(keras.ops.convert_to_numpy(output)[:, 0], whole[:, position], atol=1e-5)


def test_the_key_value_cache_is_an_input_and_an_output_of_the_attention_call():
    """Through the layer's own call: a 3-token prompt written into the cache at once, then two tokens one at a
    time, each step returning the updated cache, equal the whole sequence under the lm mask; keys and values
    computed earlier (T5's cross-attention) are attended as they are; a cache without a mask is refused."""
    keras.utils.set_random_seed(3)
    x, context = keras.random.normal((2, 5, 8)), keras.random.normal((2, 4, 8))
    attention = MultiHeadSelfAttention(2, 4, use_attention_mask=True)
    whole = keras.ops.convert_to_numpy(attention([x, x, x, AttentionMask("lm")(x[..., 0])]))
    empty = keras.ops.zeros((2, 5, 2, 4))
    cache, outputs = (empty, empty), []
    for start, stop in ((0, 3), (3, 4), (4, 5)):
        new, slots = x[:, start:stop], keras.ops.arange(start, stop, dtype="int32")
        allowed = keras.ops.arange(5)[None, None, None, :] <= slots[None, None, :, None]
        output, cache = attention([new, new, new, allowed], cache=cache,
                                  cache_slots=keras.ops.broadcast_to(slots, (2, stop - start)))
        outputs.append(keras.ops.convert_to_numpy(output))
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), whole, atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(cache[0]),
                               keras.ops.convert_to_numpy(attention.keys_and_values(x)[0]), atol=1e-6)

    cross = MultiHeadSelfAttention(2, 4)
    hidden_key = keras.ops.convert_to_tensor([[True] * 4, [True, True, False, False]])
    expected = cross([x, context, context], mask=[None, hidden_key, hidden_key])
    output, kept = cross([x, x, x], mask=[None, hidden_key, hidden_key], cache=cross.keys_and_values(context))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(output), keras.ops.convert_to_numpy(expected), atol=1e-5)
    with pytest.raises(ValueError, match="needs an attention mask"):
        cross([x, x, x], cache=(empty, empty), cache_slots=keras.ops.zeros((2, 5), "int32"))


TABLES_CONFIG = {"hidden_size": 24, "num_hidden_layers": 1, "num_attention_heads": 3, "intermediate_size": 40,
                 "max_position_embeddings": 64, "type_vocab_size": 2, "vocab_size": 97, "hidden_act": "gelu",
                 "attention_head_size": 8, "max_relative_position": 64}


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="JAX's steps call the model through stateless_call, "
                    "the path where Keras casts an Embedding's table whole")
@pytest.mark.parametrize("family", ["bert", "nezha", "t5.1.1"])
def test_mixed_bfloat16_steps_cast_the_rows_looked_up_not_the_tables(family):
    """Under mixed_bfloat16 every lookup table (tokens, segments, positions, NEZHA's and T5's relative tables) is
    read in float32 and only the rows a batch uses are cast, in the forward and the gradient alike: a table cast
    whole gets its gradient added up in bfloat16 (a slow scatter on a GPU, 8 bits of mantissa for a segment row
    that sums thousands of positions)."""
    import jax

    from kbert import build_transformer_model

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = build_transformer_model(TABLES_CONFIG, model=family)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    tables = [variable for variable in model.weights if "embeddings" in variable.path]
    assert len(tables) == 3, [table.path for table in tables]  # tokens, and segments and positions or relative
    inputs = [np.ones((2, 8), "int32")] * len(model.inputs)

    def loss(trainable, fixed):
        output = model.stateless_call(trainable, fixed, inputs, training=True)[0]
        return keras.ops.mean(keras.ops.cast(output, "float32"))

    variables = model.trainable_variables + model.non_trainable_variables
    program = jax.make_jaxpr(jax.grad(loss))([v.value for v in model.trainable_variables],
                                             [v.value for v in model.non_trainable_variables]).jaxpr
    # the program's inputs are the variables' values, in that order: a table's is read once, by its lookup
    readers = {index: [equation.primitive.name for equation in program.eqns if program.invars[index] in
                       equation.invars] for index, variable in enumerate(variables) if any(variable is t for t in tables)}
    for index, names in readers.items():
        assert names and "convert_element_type" not in names, (variables[index].path, names)


def test_roberta_positions_count_real_tokens_after_the_padding_id(tmp_path):
    """Hugging Face's RoBERTa numbering, left or right padded, from the token embedding's mask (id 1 is
    padding); the length check, get_config, and a model with it through .keras with safe_mode=True."""
    from conftest import bad_input_errors
    from kbert.layers import RobertaPositionEmbedding, TokenEmbedding

    keras.utils.set_random_seed(3)
    tokens = keras.Input((None,), dtype="int32")
    hidden = TokenEmbedding(50, 8, pad_id=1)(tokens)
    layer = RobertaPositionEmbedding(max_length=10, padding_idx=1, name="positions")
    model = keras.Model(tokens, layer(hidden))
    ids = np.array([[0, 5, 6, 2, 1, 1], [1, 1, 0, 7, 8, 2]])
    table = keras.ops.convert_to_numpy(layer.embeddings)
    expected_rows = np.array([[2, 3, 4, 5, 1, 1], [1, 1, 2, 3, 4, 5]])
    embedded = keras.ops.convert_to_numpy(model.layers[1](ids))
    np.testing.assert_allclose(model.predict(ids, verbose=0), embedded + table[expected_rows], rtol=1e-6)
    # The same rows as the unpadded text alone: padding moves no real token's position.
    alone = model.predict(np.array([[0, 7, 8, 2]]), verbose=0)
    np.testing.assert_allclose(model.predict(ids, verbose=0)[1, 2:], alone[0], rtol=1e-6)
    # Cached decoding, a token at a time, reads the rows `call` reads for an unpadded row.
    from kbert.layers.decoding import DecodingStep

    stepped = [layer.call_step(keras.ops.convert_to_tensor(embedded[1:, 2 + slot][:, None]),
                               DecodingStep(keras.ops.convert_to_tensor([[slot]]), keras.ops.ones((1, 1, 4), "bool"),
                                            caches=[])) for slot in range(4)]
    np.testing.assert_allclose(np.concatenate([keras.ops.convert_to_numpy(s) for s in stepped], 1), alone, rtol=1e-6)
    assert RobertaPositionEmbedding.from_config(layer.get_config()).get_config() == layer.get_config()
    model.save(tmp_path / "model.keras")
    restored = keras.models.load_model(tmp_path / "model.keras", safe_mode=True)
    np.testing.assert_allclose(restored.predict(ids, verbose=0), model.predict(ids, verbose=0), rtol=1e-6)
    # Last: on JAX an error raised while the predict step is traced leaves this plain Model's state unusable
    # (kbert's own models check the length before the step, `IdModel`).
    assert layer.longest_input == 8
    with pytest.raises(bad_input_errors(), match="longer than 8 tokens \\(max_position_embeddings 10, less the 2 rows"):
        model.predict(np.full((1, 9), 5), verbose=0)
