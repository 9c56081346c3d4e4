"""The decoder families as models: GPT's causality, T5's stacks apart and together, files, misuse."""

import numpy as np
import pytest

import keras
from conftest import shared_path
from kbert import build_transformer_model
from kbert.errors import ConfigError

TOKENS = np.array([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0]])


def fixture(name):
    return shared_path("fixtures", "bert4keras_families", name)


@pytest.mark.parametrize("case, model", [("gpt_tiny", "gpt"), ("gpt2_tiny", "gpt2"), ("gpt2_ml_tiny", "gpt2_ml")])
def test_gpt_families_look_only_left(case, model):
    lm = build_transformer_model(fixture(case) / "config.json", fixture(case), model=model)
    assert lm.build_spec["application"] == "lm"
    inputs = lambda ids: [ids, np.zeros_like(ids)] if len(lm.inputs) == 2 else [ids]  # noqa: E731
    full = lm.predict(inputs(TOKENS), verbose=0)
    for cut in (2, 4):
        np.testing.assert_allclose(lm.predict(inputs(TOKENS[:, :cut]), verbose=0), full[:, :cut], atol=1e-6)
    np.testing.assert_allclose(full.sum(-1), 1, atol=1e-5)  # LM-Activation: probabilities


def test_t5_encoder_and_decoder_parts_make_the_whole_model():
    directory = fixture("t5_11_tiny")
    config = directory / "config.json"
    whole = build_transformer_model(config, directory, model="t5.1.1")
    encoder = build_transformer_model(config, directory, model="t5.1.1_encoder")
    decoder = build_transformer_model(config, directory, model="t5.1.1_decoder")
    assert [tensor.name for tensor in decoder.inputs] == ["Input-Context", "Decoder-Input-Token"]
    targets = np.array([[1, 9, 4, 0], [1, 3, 0, 0]])
    together = whole.predict([TOKENS, targets], verbose=0)
    for row, length in enumerate((6, 3)):  # each source alone, unpadded: the whole model masks the padding
        source = TOKENS[row:row + 1, :length]
        apart = decoder.predict([encoder.predict(source, verbose=0), targets[row:row + 1]], verbose=0)
        np.testing.assert_allclose(apart[0], together[row], atol=1e-5)


@pytest.mark.parametrize("case, model", [("t5_11_tiny", "t5.1.1"), ("t5_11_tiny", "mt5.1.1"), ("t5_tiny", "t5")])
def test_a_t5_decoder_started_at_its_padding_id_never_sees_ahead(case, model):
    """bert4keras's T5 hides decoder id 0, T5's own start id: position 0 then has every key hidden, and its output
    must be the same whatever follows (bert4keras 0.11.5: difference 0.0 between calls), as every position's is."""
    directory = fixture(case)  # mT5's checkpoints name their variables apart: its model from random weights
    whole = build_transformer_model(directory / "config.json", None if model == "mt5.1.1" else directory, model=model)
    sources = np.repeat(TOKENS[:1], 3, axis=0)
    targets = np.array([[0, 9, 4, 7], [0, 3, 0, 0], [0, 60, 61, 62]])  # the same start, different futures
    probabilities = whole.predict([sources, targets], verbose=0)
    assert np.isfinite(probabilities).all()
    for row in (1, 2):  # float32's noise between rows of a batch; a future seen moves it by ~1e-4
        np.testing.assert_allclose(probabilities[row, 0], probabilities[0, 0], atol=1e-7, rtol=0)
    for cut in (1, 2, 3):  # every position: the same with the future cut off
        np.testing.assert_allclose(whole.predict([sources, targets[:, :cut]], verbose=0), probabilities[:, :cut],
                                   atol=1e-6)


def test_t5_keras_file_round_trip(tmp_path):
    directory = fixture("t5_tiny")
    model = build_transformer_model(directory / "config.json", directory, model="t5")
    model.save(tmp_path / "t5.keras")
    loaded = keras.saving.load_model(tmp_path / "t5.keras", safe_mode=True)
    assert loaded.family == "t5.1.0"
    targets = np.array([[1, 9, 4], [1, 3, 0]])
    np.testing.assert_array_equal(loaded.predict([TOKENS, targets], verbose=0),
                                  model.predict([TOKENS, targets], verbose=0))


@pytest.mark.parametrize("model, kwargs, message", [
    ("gpt2", {"application": "unilm"}, "application='unilm': model='gpt2' builds 'lm'"),
    ("gpt", {"with_mlm": True}, "model='gpt' has no with_mlm head"),
    ("t5.1.1", {"application": "lm"}, "application='lm': model='t5.1.1' builds 'encoder'"),
    ("roformer_v2", {"with_pool": True}, "model='roformer_v2' has no with_pool head; it builds with_mlm"),
])
def test_what_a_family_cannot_build_is_an_error(model, kwargs, message):
    case = {"gpt2": "gpt2_tiny", "gpt": "gpt_tiny", "t5.1.1": "t5_11_tiny", "roformer_v2": "roformer_v2_tiny"}[model]
    with pytest.raises(ConfigError, match=message):
        build_transformer_model(fixture(case) / "config.json", model=model, **kwargs)


def test_t5_config_errors_name_the_key():
    base = {"vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 32}
    with pytest.raises(ConfigError, match=r"key 'hidden_act': expected an activation or two"):
        build_transformer_model({**base, "hidden_act": ["gelu", "linear", "relu"]}, model="t5.1.1")
    with pytest.raises(ConfigError, match="key 'embedding_size': T5 embeds tokens at hidden_size"):
        build_transformer_model({**base, "embedding_size": 8}, model="t5")
    model = build_transformer_model({**base, "num_attention_heads": 3, "attention_head_size": 4}, model="t5.1.1")
    assert model.get_layer("Encoder-Transformer-0-MultiHeadSelfAttention").count_params() == 4 * 16 * 12


# --- bert4keras's builder options ------------------------------------------------------------------
def test_compound_tokens_extend_every_vocabulary_table_with_means():
    """basic_make_uncased_model_cased.py's option: new tokens start as the (weighted) mean of old ones."""
    directory = fixture("bert_lm_tiny")
    base = build_transformer_model(directory / "config.json", directory, with_mlm=True)
    compound = [[5, 7], ([1, 2, 3], [1, 0, 3])]
    model = build_transformer_model(directory / "config.json", directory, with_mlm=True, compound_tokens=compound)
    for path in ("Embedding-Token/embeddings", "MLM-Bias/bias"):
        old = keras.ops.convert_to_numpy(next(w for w in base.weights if w.path.startswith(path.split("/")[0])))
        new = keras.ops.convert_to_numpy(next(w for w in model.weights if w.path.startswith(path.split("/")[0])))
        assert len(new) == len(old) + 2 and np.array_equal(new[:-2], old)
        np.testing.assert_allclose(new[-2], old[[5, 7]].mean(0), atol=1e-7)
        np.testing.assert_allclose(new[-1], (old[1] + 3 * old[3]) / 4, atol=1e-7)
    # After keep_tokens, the compound ids count in the kept vocabulary.
    kept = build_transformer_model(directory / "config.json", directory, keep_tokens=[0, 1, 2, 40, 41],
                                   compound_tokens=[[3, 4]])
    table = keras.ops.convert_to_numpy(kept.get_layer("Embedding-Token").embeddings)
    np.testing.assert_allclose(table[-1], keras.ops.convert_to_numpy(base.get_layer("Embedding-Token").embeddings)[[40, 41]].mean(0),
                               atol=1e-7)


@pytest.mark.parametrize("compound, message", [
    ([[]], r"compound_tokens\[0\]: expected a non-empty list of token ids"),
    ([[1], [2.5]], r"compound_tokens\[1\]: expected"),
    ([([1, 2], [1])], r"a pair \(ids, weights\) of equal lengths"),
    ([[999]], r"model.ckpt: compound_tokens\[0\] has id\(s\) \[999\] outside the vocabulary of 64"),
])
def test_compound_token_errors(compound, message):
    from kbert import KbertError

    directory = fixture("bert_lm_tiny")
    with pytest.raises(KbertError, match=message):
        build_transformer_model(directory / "config.json", directory, compound_tokens=compound)


def conditional_lm(**options):
    """task_conditional_language_model.py's model: a class id's embedding conditions every layer norm."""
    directory = fixture("bert_lm_tiny")
    classes = keras.Input(shape=(1,), name="Input-Class")
    condition = keras.layers.Flatten(name="Class-Flatten")(keras.layers.Embedding(2, 8, name="Class-Embedding")(classes))
    return build_transformer_model(directory / "config.json", directory, application="lm", with_mlm=True,
                                   layer_norm_cond=condition, additional_input_layers=classes, **options)


def test_layer_norm_cond_conditions_every_norm_and_loads_the_checkpoint(tmp_path):
    from kbert import load_google_checkpoint, save_google_checkpoint

    directory = fixture("bert_lm_tiny")
    base = build_transformer_model(directory / "config.json", directory, application="lm", with_mlm=True)
    model = conditional_lm(layer_norm_cond_hidden_size=4, layer_norm_cond_hidden_act="swish")
    assert [tensor.name for tensor in model.inputs] == ["Input-Token", "Input-Segment", "Input-Class"]
    norms = [layer for layer in model.layers if type(layer).__name__ == "ConditionalLayerNormalization"]
    assert [layer.name for layer in norms] == [layer.name for layer in base.layers
                                              if isinstance(layer, keras.layers.LayerNormalization)]
    # Per norm: the projection 8·4, W_γ and W_β 4·16 each; and the class table 2·8.
    assert model.count_params() - base.count_params() == len(norms) * (8 * 4 + 2 * 4 * 16) + 2 * 8
    ids, segments = TOKENS[:, :4], np.zeros_like(TOKENS[:, :4])
    expected = base.predict([ids, segments], verbose=0)
    np.testing.assert_allclose(model.predict([ids, segments, np.array([[0], [1]])], verbose=0), expected, atol=1e-6)
    # The checkpoint holds the family's variables only (the condition's are in none, as in bert4keras).
    report = load_google_checkpoint(base, save_google_checkpoint(model, tmp_path / "model.ckpt"))
    assert report.unused == [] and len(report.loaded) == len(base.weights)
    model.get_layer("Class-Embedding").embeddings.assign(np.stack([np.ones(8), -np.ones(8)]))
    for norm in norms:  # once W_γ is learned, the class changes the output
        for dense in (norm.hidden_dense, norm.gamma_dense):
            dense.kernel.assign(np.full(dense.kernel.shape, 0.5))
    first, second = (model.predict([ids, segments, np.full((2, 1), label)], verbose=0) for label in (0, 1))
    assert np.abs(first - second).max() > 0.1 * first.max()


def test_layer_norm_cond_misuse_is_an_error():
    from kbert import KbertError, generate

    with pytest.raises(KbertError, match="generation re-runs the model's own graph, which cannot take "
                                         "layer_norm_cond"):
        generate(conditional_lm(), [[2, 5]], max_new_tokens=2, end_id=-1)
    directory = fixture("bert_lm_tiny")
    with pytest.raises(ConfigError, match="layer_norm_cond_hidden_size and layer_norm_cond_hidden_act shape"):
        build_transformer_model(directory / "config.json", layer_norm_cond_hidden_size=4)
    with pytest.raises(ConfigError, match=r"layer_norm_cond: expected a Keras tensor \[batch, C\]"):
        build_transformer_model(directory / "config.json", layer_norm_cond=np.ones((1, 8)))
    condition = keras.Input(shape=(8,))
    with pytest.raises(ConfigError, match="model='t5.1.1' has no LayerNorm to condition"):
        build_transformer_model(fixture("t5_11_tiny") / "config.json", model="t5.1.1", layer_norm_cond=condition,
                                additional_input_layers=condition)


@pytest.mark.parametrize("model, case", [("bert", "bert_lm_tiny"), ("albert", "albert_tiny"), ("nezha", "nezha_tiny"),
                                         ("roformer", "roformer_tiny")])
def test_residual_attention_scores_keep_the_layers_and_change_only_later_blocks(model, case):
    directory = fixture(case)
    base = build_transformer_model(directory / "config.json", directory, model=model)
    realformer = build_transformer_model(directory / "config.json", directory, model=model,
                                         residual_attention_scores=True)
    assert [layer.name for layer in realformer.layers] == [layer.name for layer in base.layers]
    assert realformer.count_params() == base.count_params()
    inputs = [TOKENS[:, :4], np.zeros_like(TOKENS[:, :4])]
    first = "Transformer-MultiHeadSelfAttention" if model == "albert" else "Transformer-0-MultiHeadSelfAttention"

    def first_attention(network):  # the first call: no earlier scores to add
        node = network.get_layer(first)._inbound_nodes[0]
        return keras.Model(network.inputs, node.output_tensors[0]).predict(inputs, verbose=0)

    np.testing.assert_allclose(first_attention(realformer), first_attention(base), atol=1e-6)
    assert np.abs(realformer.predict(inputs, verbose=0) - base.predict(inputs, verbose=0)).max() > 1e-3


@pytest.mark.parametrize("kwargs, message", [
    ({"application": "lm"}, "residual_attention_scores: built for the encoder families' application='encoder'"),
    ({"model": "gpt2"}, r"not model='gpt2', application='lm'"),
])
def test_residual_attention_scores_misuse(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        build_transformer_model(fixture("bert_lm_tiny") / "config.json", residual_attention_scores=True, **kwargs)
