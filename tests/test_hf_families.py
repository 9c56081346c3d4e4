"""Hugging Face safetensors of ALBERT, ELECTRA, RoFormer, NEZHA, GPT-2, T5, mT5, RoBERTa and XLM-R, both ways.

Two kinds of test:

- Without `transformers`: each family's Hugging Face layout is written here by
  hand (the names and shapes `transformers` 5.23 saves, NEZHA's from 4.x,
  where it was removed in 5.0), every tensor filled by the formula
  `0.05 * sin(0.7 * k + i)` (k: the element's index in the flattened tensor,
  i: the tensor's index in the list), loaded into kbert and written back:
  the same names and the same bytes come out.
- With `transformers` and `torch` (`pip install -e '.[hf]'`): a tiny random
  model of each family made by `transformers` itself (fixed seed), saved,
  loaded into kbert from its own `config.json`, gives `transformers`' outputs
  on a padded batch; kbert's `save_hf_weights` loads back into `transformers`
  with no missing or unexpected tensor and the same outputs.
"""

import json

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from conftest import needs_tensorflow, shared_path
from kbert import CheckpointError, build_transformer_model, load_hf_weights, save_hf_weights
from kbert.builder.convert import convert

V, H, E, I, P, T = 50, 16, 8, 32, 40, 2
CONFIG = {"vocab_size": V, "hidden_size": H, "num_hidden_layers": 2, "num_attention_heads": 2,
          "intermediate_size": I, "max_position_embeddings": P, "type_vocab_size": T,
          "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def linear(name, rows, columns):
    return {f"{name}.weight": (rows, columns), f"{name}.bias": (rows,)}


def layer_norm(name, width=H):
    return {f"{name}.weight": (width,), f"{name}.bias": (width,)}


def embeddings(width, positions=True):
    names = {"embeddings.word_embeddings.weight": (V, width), "embeddings.token_type_embeddings.weight": (T, width)}
    if positions:
        names["embeddings.position_embeddings.weight"] = (P, width)
    return {**names, **layer_norm("embeddings.LayerNorm", width)}


def bert_blocks(layers=2):
    names = {}
    for index in range(layers):
        scope = f"encoder.layer.{index}"
        for part in ("query", "key", "value"):
            names.update(linear(f"{scope}.attention.self.{part}", H, H))
        names.update({**linear(f"{scope}.attention.output.dense", H, H),
                      **layer_norm(f"{scope}.attention.output.LayerNorm"),
                      **linear(f"{scope}.intermediate.dense", I, H), **linear(f"{scope}.output.dense", H, I),
                      **layer_norm(f"{scope}.output.LayerNorm")})
    return names


def bert_mlm_head(width=H):
    return {"cls.predictions.bias": (V,), **linear("cls.predictions.transform.dense", width, H),
            **layer_norm("cls.predictions.transform.LayerNorm", width)}


def prefixed(prefix, names):
    return {f"{prefix}.{name}": shape for name, shape in names.items()}


ALBERT_BLOCK = "encoder.albert_layer_groups.0.albert_layers.0"
ALBERT_BACKBONE = {
    **embeddings(E), **linear("encoder.embedding_hidden_mapping_in", H, E),
    **{f"{ALBERT_BLOCK}.{name}": shape for name, shape in {
        **layer_norm("full_layer_layer_norm"), **linear("attention.query", H, H), **linear("attention.key", H, H),
        **linear("attention.value", H, H), **linear("attention.dense", H, H), **layer_norm("attention.LayerNorm"),
        **linear("ffn", I, H), **linear("ffn_output", H, I)}.items()},
}

GPT2_CONFIG = {"model_type": "gpt2", "vocab_size": V, "n_embd": H, "n_layer": 2, "n_head": 2, "n_inner": I,
               "n_positions": P, "activation_function": "gelu_new", "resid_pdrop": 0.0, "embd_pdrop": 0.0,
               "attn_pdrop": 0.0}
GPT2_BLOCKS = {f"h.{index}.{name}": shape for index in range(2) for name, shape in {
    **layer_norm("ln_1"), "attn.c_attn.weight": (H, 3 * H), "attn.c_attn.bias": (3 * H,),  # Conv1D: [in, out]
    "attn.c_proj.weight": (H, H), "attn.c_proj.bias": (H,), **layer_norm("ln_2"),
    "mlp.c_fc.weight": (H, I), "mlp.c_fc.bias": (I,), "mlp.c_proj.weight": (I, H), "mlp.c_proj.bias": (H,)}.items()}

MT5_CONFIG = {"model_type": "mt5", "vocab_size": V, "d_model": H, "d_kv": 4, "d_ff": I, "num_layers": 2,
              "num_heads": 2, "feed_forward_proj": "gated-gelu", "dropout_rate": 0.0, "tie_word_embeddings": False,
              "decoder_start_token_id": 0}
INNER = 2 * 4  # heads · d_kv


def t5_stack(stack, layers=2):
    names = {f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight": (32, 2),
             f"{stack}.final_layer_norm.weight": (H,)}
    for index in range(layers):
        scope = f"{stack}.block.{index}.layer"
        attentions = ["SelfAttention"] + (["EncDecAttention"] if stack == "decoder" else [])
        for number, attention in enumerate(attentions):
            names.update({f"{scope}.{number}.{attention}.{part}.weight": (INNER, H) for part in "qkv"})
            names.update({f"{scope}.{number}.{attention}.o.weight": (H, INNER), f"{scope}.{number}.layer_norm.weight": (H,)})
        last = len(attentions)
        names.update({f"{scope}.{last}.DenseReluDense.wi_0.weight": (I, H), f"{scope}.{last}.DenseReluDense.wi_1.weight": (I, H),
                      f"{scope}.{last}.DenseReluDense.wo.weight": (H, I), f"{scope}.{last}.layer_norm.weight": (H,)})
    return names


# layout -> (config.json, builder flags, the Hugging Face tensors, the class).
LAYOUTS = {
    "albert": ({**CONFIG, "model_type": "albert", "embedding_size": E, "hidden_act": "gelu_new"}, {"with_mlm": True},
               {**prefixed("albert", ALBERT_BACKBONE), "predictions.bias": (V,),
                **linear("predictions.dense", E, H), **layer_norm("predictions.LayerNorm", E)},
               "AlbertForMaskedLM"),
    "albert_pooler": ({**CONFIG, "model_type": "albert", "embedding_size": E}, {"with_pool": True},
                      {**ALBERT_BACKBONE, **linear("pooler", H, H)}, "AlbertModel"),
    "electra": ({**CONFIG, "model_type": "electra", "embedding_size": E}, {"with_discriminator": True},
                {**prefixed("electra", {**embeddings(E), **linear("embeddings_project", H, E), **bert_blocks()}),
                 **linear("discriminator_predictions.dense", H, H),
                 **linear("discriminator_predictions.dense_prediction", 1, H)},
                "ElectraForPreTraining"),
    "roformer": ({**CONFIG, "model_type": "roformer"}, {"with_mlm": True},
                 {**prefixed("roformer", {**embeddings(H, positions=False), **bert_blocks()}), **bert_mlm_head()},
                 "RoFormerForMaskedLM"),
    "roformer_projected": ({**CONFIG, "model_type": "roformer", "embedding_size": E}, {},
                           {**embeddings(E, positions=False), **linear("embeddings_project", H, E),
                            **bert_blocks()}, "RoFormerModel"),
    "gpt2": (GPT2_CONFIG, {}, prefixed("transformer", {"wte.weight": (V, H), "wpe.weight": (P, H), **GPT2_BLOCKS,
                                                        **layer_norm("ln_f")}), "GPT2LMHeadModel"),
    "mt5": (MT5_CONFIG, {}, {"shared.weight": (V, H), **t5_stack("encoder"), **t5_stack("decoder"),
                             "lm_head.weight": (V, H)}, "MT5ForConditionalGeneration"),
    "roberta": ({**CONFIG, "model_type": "roberta", "type_vocab_size": 1, "pad_token_id": 1}, {"with_mlm": True},
                {**prefixed("roberta", {**embeddings(H), **bert_blocks()}),
                 "roberta.embeddings.token_type_embeddings.weight": (1, H), "lm_head.bias": (V,),
                 **linear("lm_head.dense", H, H), **layer_norm("lm_head.layer_norm")}, "RobertaForMaskedLM"),
    "xlm-roberta_pooler": ({**CONFIG, "model_type": "xlm-roberta", "pad_token_id": 1}, {"with_pool": True},
                           {**embeddings(H), **bert_blocks(), **linear("pooler.dense", H, H)}, "XLMRobertaModel"),
    "nezha": ({**CONFIG, "model_type": "nezha", "max_relative_position": 64}, {"with_mlm": True, "with_nsp": True},
              {**prefixed("nezha", {**embeddings(H, positions=False), **bert_blocks(), **linear("pooler.dense", H, H)}),
               **bert_mlm_head(), **linear("cls.seq_relationship", 2, H)},
              "NezhaForPreTraining"),
}


def formula_tensors(names):
    """Every tensor by the module docstring's formula."""
    return {name: (0.05 * np.sin(0.7 * np.arange(int(np.prod(shape))) + index)).reshape(shape).astype(np.float32)
            for index, (name, shape) in enumerate(names.items())}


def write_layout(directory, layout, layouts=LAYOUTS):
    """`layouts[layout]`'s config.json and its tensors (`formula_tensors`) in `directory`; the tensors."""
    config, _, names, architecture = layouts[layout]
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({**config, "architectures": [architecture]}))
    tensors = formula_tensors(names)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return tensors


def written_back(tmp_path, layout, layouts):
    """`layouts[layout]` written by hand (`write_layout`), loaded into kbert and saved again: the same names and
    the same bytes come out. Returns the model, the tensors and the config.json kbert wrote."""
    tensors = write_layout(tmp_path / "hf", layout, layouts)
    config, flags, _, architecture = layouts[layout]
    model = build_transformer_model(tmp_path / "hf" / "config.json", tmp_path / "hf", **flags)
    save_hf_weights(model, tmp_path / "out")
    written = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert set(written) == set(tensors)
    for name, value in tensors.items():
        np.testing.assert_array_equal(written[name], value, err_msg=name)
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert saved["architectures"] == [architecture] and saved["model_type"] == config["model_type"]
    return model, tensors, saved


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layout_loads_and_is_written_back_byte_for_byte(tmp_path, layout):
    tensors = write_layout(tmp_path / "hf", layout)
    _, flags, _, architecture = LAYOUTS[layout]
    model = build_transformer_model(tmp_path / "hf" / "config.json", tmp_path / "hf", **flags)
    # Linear weights are [out, in] in PyTorch's layout, [in, out] in Keras's; GPT-2's Conv1D is [in, out],
    # its query the first third of c_attn.
    attention = {"albert": "Transformer-MultiHeadSelfAttention",
                 "mt5": "Encoder-Transformer-0-MultiHeadSelfAttention"}.get(layout.split("_")[0],
                                                                             "Transformer-0-MultiHeadSelfAttention")
    query = keras.ops.convert_to_numpy({variable.path: variable for variable in model.weights}[f"{attention}/query/kernel"])
    if layout == "gpt2":
        np.testing.assert_array_equal(query, tensors["transformer.h.0.attn.c_attn.weight"][:, :H])
    elif layout == "mt5":
        np.testing.assert_array_equal(query, tensors["encoder.block.0.layer.0.SelfAttention.q.weight"].T)
    else:
        name = next(name for name in tensors if name.endswith(("self.query.weight", "attention.query.weight")))
        np.testing.assert_array_equal(query, tensors[name].T)
    vocab = shared_path("vocab", "chinese_vocab.txt")
    save_hf_weights(model, tmp_path / "out", vocab=vocab)
    assert (tmp_path / "out" / "vocab.txt").read_bytes() == vocab.read_bytes()
    written = load_file(str(tmp_path / "out" / "model.safetensors"))
    computed = {name for name in written if name.endswith("embed_positions.weight")}  # RoFormer's sinusoids
    assert set(written) - computed == set(tensors)
    for name, value in tensors.items():
        np.testing.assert_array_equal(written[name], value, err_msg=name)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == [architecture]
    assert config["model_type"] == LAYOUTS[layout][0]["model_type"]
    again = build_transformer_model(tmp_path / "out" / "config.json", tmp_path / "out", **flags)
    for a, b in zip(model.weights, again.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))


def test_roformer_sinusoids_are_hugging_faces(tmp_path):
    """Written for `transformers` (which would otherwise call the table newly initialised): position p,
    pair i of a head's K = 8 features: sin(p / 10000^(2i/K)) in the row's first half, cos in its second."""
    write_layout(tmp_path / "hf", "roformer_projected")
    model = build_transformer_model(tmp_path / "hf" / "config.json", tmp_path / "hf")
    save_hf_weights(model, tmp_path / "out")
    table = load_file(str(tmp_path / "out" / "model.safetensors"))["encoder.embed_positions.weight"]
    assert table.shape == (P, H // 2)
    np.testing.assert_allclose(table[3, [0, 1, 4, 5]], [np.sin(3), np.sin(3 / 10), np.cos(3), np.cos(3 / 10)],
                               rtol=1e-6)


def test_missing_tensor_is_named_and_nothing_is_loaded(tmp_path):
    tensors = write_layout(tmp_path / "hf", "albert")
    del tensors["albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight"]
    save_file(tensors, str(tmp_path / "hf" / "model.safetensors"))
    model = build_transformer_model(tmp_path / "hf" / "config.json", with_mlm=True)
    before = [keras.ops.convert_to_numpy(variable).copy() for variable in model.weights]
    with pytest.raises(CheckpointError, match=r"nothing was loaded.\nMissing 1 variable\(s\) the model needs:\n"
                                              r"  encoder.albert_layer_groups.0.albert_layers.0.ffn.weight "
                                              r"\(for Transformer-FeedForward/intermediate/kernel\)"):
        load_hf_weights(model, tmp_path / "hf")
    for old, variable in zip(before, model.weights):
        np.testing.assert_array_equal(old, keras.ops.convert_to_numpy(variable))


@pytest.mark.parametrize("key, value, message", [
    ("inner_group_num", 2, "key 'inner_group_num': kbert, as bert4keras, builds ALBERT with one group"),
    ("rotary_value", True, "key 'rotary_value': kbert's RoFormer, as bert4keras's and the released RoFormer "
                           "models, rotates queries and keys only"),
    ("layer_norm_epsilon", 1e-6, "key 'layer_norm_epsilon': bert4keras's GPT-2 normalises with ε 1e-05"),
    ("num_decoder_layers", 3, "key 'num_decoder_layers': kbert, as bert4keras, builds T5's decoder with as many "
                              "blocks as its encoder \\(2\\), got 3"),
])
def test_hugging_face_keys_kbert_cannot_build_are_errors(tmp_path, key, value, message):
    from kbert import ConfigError

    write_layout(tmp_path / "hf", {"inner_group_num": "albert", "rotary_value": "roformer",
                                   "num_decoder_layers": "mt5"}.get(key, "gpt2"))
    path = tmp_path / "hf" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    with pytest.raises(ConfigError, match=f"{path}: {message}"):
        build_transformer_model(path)


@pytest.mark.parametrize("fixture, model", [("albert_tiny", "albert"), ("electra_tiny", "electra"),
                                            ("roformer_tiny", "roformer"), ("nezha_tiny", "nezha"),
                                            ("gpt2_tiny", "gpt2"), ("t5_tiny", "t5.1.0"), ("t5_11_tiny", "t5.1.1")])
def test_google_to_hugging_face_and_back_is_bit_identical(tmp_path, fixture, model):
    needs_tensorflow("reading and writing a Google checkpoint")
    import tensorflow as tf

    source = shared_path("fixtures", "bert4keras_families", fixture)
    to_hf = convert(source / "model.ckpt", tmp_path / "hf", config_path=str(source / "config.json"), model=model)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == model.split(".")[0]
    back = convert(tmp_path / "hf", tmp_path / "google")
    original, again = tf.train.load_checkpoint(str(source / "model.ckpt")), tf.train.load_checkpoint(back["weights"])
    names = [name for name in again.get_variable_to_shape_map() if name != "_CHECKPOINTABLE_OBJECT_GRAPH"]
    assert len(names) == to_hf["variables"]
    for name in names:
        np.testing.assert_array_equal(again.get_tensor(name), original.get_tensor(name), err_msg=name)


# --- against transformers itself ------------------------------------------------------------------

TOKENS = np.array([[2, 5, 7, 9, 11, 3], [2, 8, 6, 3, 0, 0]])
SEGMENTS = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0]])
REAL = TOKENS > 0


def transformers_outputs(model, torch):
    segments = {} if model.config.model_type == "gpt2" else {"token_type_ids": torch.tensor(SEGMENTS)}
    with torch.no_grad():
        return model(input_ids=torch.tensor(TOKENS), attention_mask=torch.tensor(REAL.astype(np.int64)), **segments)


def saved_reference(directory, layout):
    """torch, transformers, and the layout's model made by transformers (seed 0), saved in `directory`."""
    torch = pytest.importorskip("torch", reason="the [hf] extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the [hf] extra is not installed")
    config, _, _, architecture = LAYOUTS[layout]
    torch.manual_seed(0)
    reference = getattr(transformers, architecture)(transformers.AutoConfig.for_model(**config)).eval()
    reference.save_pretrained(directory)
    return torch, transformers, reference


def padded_rows(vocab_size: int, lowest: int, length: int, second_real: int):
    """Two rows of `length` random ids from `lowest` (past the specials), the second padded with 0 after
    `second_real` tokens, and which positions are real (transformers' attention mask)."""
    tokens = np.random.default_rng(0).integers(lowest, vocab_size, (2, length))
    tokens[1, second_real:] = 0
    return tokens, tokens > 0


def assert_transformers_parity(tmp_path, layout, tokens, real):
    """A random model that transformers builds for `layout` (config, flags, names, class; seed 0), saved: kbert's
    model of it gives transformers' outputs on `tokens` (MLM probabilities or hidden states at the `real` tokens,
    or the pooled vectors) within 1e-4, and transformers reads kbert's saves back (`transformers_reads_back`)."""
    torch = pytest.importorskip("torch", reason="the parity extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the parity extra is not installed")
    config, flags, _, architecture = layout

    def outputs(model):
        with torch.no_grad():
            result = model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(real.astype(np.int64)))
        if flags.get("with_pool"):
            return result.pooler_output.numpy()
        return (result.logits if flags.get("with_mlm") else result.last_hidden_state).numpy()[real]

    torch.manual_seed(0)
    reference = getattr(transformers, architecture)(transformers.AutoConfig.for_model(**config)).eval()
    reference.save_pretrained(tmp_path / "hf")
    expected = outputs(reference)
    # an MLM head compared as logits: probabilities over a small vocabulary hide an error of 1e-2 in a logit
    model = build_transformer_model(tmp_path / "hf" / "config.json", tmp_path / "hf",
                                    **{**flags, **({"with_mlm": "linear"} if flags.get("with_mlm") else {})})
    ours = model.predict_on_batch([tokens, np.zeros_like(tokens)])
    np.testing.assert_allclose(ours if flags.get("with_pool") else ours[real], expected, atol=1e-4)
    transformers_reads_back(model, transformers, architecture, tmp_path, outputs, expected)


def transformers_reads_back(model, transformers, architecture, root, outputs, expected):
    """kbert's save of `model`, one file and shards of a few kB, loaded by transformers' `architecture` with no
    missing or unexpected tensor and giving `expected` (`outputs` of a transformers model)."""
    for directory, shard in (("kbert", None), ("sharded", 6000)):
        save_hf_weights(model, root / directory, max_shard_size=shard)
        again, info = getattr(transformers, architecture).from_pretrained(root / directory, output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        np.testing.assert_allclose(outputs(again.eval()), expected, atol=1e-6)
    assert len(list((root / "sharded").glob("model-*.safetensors"))) > 1


@pytest.mark.parametrize("layout", sorted(set(LAYOUTS) - {"nezha", "mt5", "roberta", "xlm-roberta_pooler"}))
@pytest.mark.parity
def test_same_outputs_as_transformers_both_ways(tmp_path, layout):
    torch, transformers, reference = saved_reference(tmp_path / "hf", layout)
    _, flags, _, architecture = LAYOUTS[layout]
    expected = transformers_outputs(reference, torch)

    linear = {"with_mlm": "linear"} if flags.get("with_mlm") else {}  # an MLM head compared as logits
    model = build_transformer_model(tmp_path / "hf" / "config.json", tmp_path / "hf", **{**flags, **linear})
    ours = model.predict(TOKENS if layout == "gpt2" else [TOKENS, SEGMENTS], verbose=0)
    if flags.get("with_pool"):
        np.testing.assert_allclose(ours, keras.ops.convert_to_numpy(expected.pooler_output), atol=1e-4)
    else:
        logits = expected[0]
        if layout == "gpt2":
            logits = torch.softmax(logits, -1)
        elif flags.get("with_discriminator"):
            logits = torch.sigmoid(logits)[..., None]
        np.testing.assert_allclose(ours[REAL], keras.ops.convert_to_numpy(logits)[REAL], atol=1e-4)

    save_hf_weights(model, tmp_path / "kbert")
    again, info = getattr(transformers, architecture).from_pretrained(tmp_path / "kbert", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    np.testing.assert_allclose(keras.ops.convert_to_numpy(transformers_outputs(again.eval(), torch)[0])[REAL],
                               keras.ops.convert_to_numpy(expected[0])[REAL], atol=1e-6)


@pytest.mark.parametrize("version, untied", [("t5.1.0", False), ("t5.1.1", True), ("mt5", True), ("mt5", False)])
@pytest.mark.parity
def test_t5_outputs_and_greedy_decoding_are_transformers_both_ways(tmp_path, version, untied):
    """The decoder starts at id 0, as Hugging Face's T5 does; T5.1.1 and mT5 with their own LM head, as
    released, or (a new model of transformers 5) tied to `shared` and saved without `lm_head`."""
    torch = pytest.importorskip("torch", reason="the [hf] extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the [hf] extra is not installed")
    from kbert import generate

    options = {key: value for key, value in MT5_CONFIG.items() if key != "model_type"}
    if version == "t5.1.0":
        options.update(feed_forward_proj="relu", tie_word_embeddings=True)
    config = transformers.AutoConfig.for_model("mt5" if version == "mt5" else "t5", **options)
    torch.manual_seed(0)
    reference = (transformers.MT5ForConditionalGeneration if version == "mt5"
                 else transformers.T5ForConditionalGeneration)(config).eval()
    if untied:
        reference.lm_head.weight = torch.nn.Parameter(torch.randn(V, H) * 0.5)
    reference.save_pretrained(tmp_path / "hf")
    assert ("lm_head.weight" in load_file(str(tmp_path / "hf" / "model.safetensors"))) == untied
    source, decoder = np.array([[5, 7, 9, 11, 1], [8, 6, 1, 0, 0]]), np.array([[0, 4, 12, 13], [0, 9, 3, 0]])
    real = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=bool)

    def reference_outputs(model):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor(source), attention_mask=torch.tensor(source > 0),
                           decoder_input_ids=torch.tensor(decoder)).logits
        return keras.ops.convert_to_numpy(torch.softmax(logits, -1))

    expected = reference_outputs(reference)
    model = build_transformer_model(tmp_path / "hf" / "config.json", tmp_path / "hf")
    assert model.family == ("mt5.1.1" if version == "mt5" else version)
    np.testing.assert_allclose(model.predict([source, decoder], verbose=0)[real], expected[real], atol=1e-4)
    with torch.no_grad():
        greedy = reference.generate(torch.tensor(source[:1]), max_new_tokens=6, do_sample=False, num_beams=1)
    for use_cache in (True, False):
        ours = generate(model, [source[0].tolist()], max_new_tokens=6, end_id=1, start_id=0, use_cache=use_cache)
        assert [0] + ours[0] == greedy[0].tolist()[:len(ours[0]) + 1]

    save_hf_weights(model, tmp_path / "kbert")
    again, info = type(reference).from_pretrained(tmp_path / "kbert", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    np.testing.assert_allclose(reference_outputs(again.eval())[real], expected[real], atol=1e-6)


@pytest.mark.parity
def test_gpt2_reads_id_0_as_a_token_as_transformers_does(tmp_path):
    """Hugging Face's GPT-2 has no padding id (its id 0 is `!`): id 0 at real positions is a token like any."""
    from kbert import generate

    config = {key: value for key, value in GPT2_CONFIG.items() if key != "model_type"}
    torch = pytest.importorskip("torch", reason="the [hf] extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the [hf] extra is not installed")
    torch.manual_seed(0)
    reference = transformers.GPT2LMHeadModel(transformers.GPT2Config(**config)).eval()
    reference.save_pretrained(tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text()).get("pad_token_id") is None
    model = build_transformer_model(tmp_path / "hf" / "config.json", tmp_path / "hf")
    assert model.build_spec["config"]["pad_token_id"] is None
    tokens = np.array([[2, 0, 7, 0, 0, 3], [0, 8, 6, 3, 9, 0]])
    with torch.no_grad():
        expected = keras.ops.convert_to_numpy(torch.softmax(reference(input_ids=torch.tensor(tokens)).logits, -1))
    np.testing.assert_allclose(model.predict(tokens, verbose=0), expected, atol=1e-4)
    # A prompt may end in id 0, and id 0 may be generated: the greedy path is transformers' argmax.
    prompt = [5, 0, 0]
    ours = generate(model, [prompt], max_new_tokens=4, end_id=-1)[0]
    ids = list(prompt)
    for _ in range(4):
        with torch.no_grad():
            ids.append(int(reference(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    assert ours == ids[len(prompt):]


@pytest.mark.parametrize("vocabulary", ["wordpiece", "none"])
def test_t5_config_names_the_framing_of_its_vocabulary(tmp_path, vocabulary):
    """A T5 on a WordPiece vocab.txt (kbert's seq2seq, T5 PEGASUS) starts from [CLS] and ends with [SEP]
    in its config.json; without one, SentencePiece T5's 0 and 1."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(MT5_CONFIG))
    model = build_transformer_model(str(config), model="mt5.1.1")
    vocab = None
    if vocabulary == "wordpiece":
        vocab = tmp_path / "vocab.txt"
        vocab.write_text("\n".join(["[PAD]", "[UNK]", "x", "[CLS]", "[SEP]", "y"]) + "\n")
    save_hf_weights(model, tmp_path / "hf", vocab=vocab)
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    expected = (3, 4) if vocab else (0, 1)
    assert (written["decoder_start_token_id"], written["eos_token_id"]) == expected
    assert written["pad_token_id"] == 0


ROBERTA_TOKENS = np.array([[0, 5, 7, 9, 11, 2], [0, 8, 6, 2, 1, 1], [1, 1, 0, 8, 6, 2]])  # right and left padded
ROBERTA_REAL = ROBERTA_TOKENS != 1  # <pad> is id 1, <s> id 0


@pytest.mark.parametrize("layout", ["roberta", "xlm-roberta_pooler"])
@pytest.mark.parity
def test_roberta_and_xlm_r_give_transformers_outputs_both_ways(tmp_path, layout):
    """Positions after the padding id, counted over the real tokens whichever side the padding is on."""
    torch, transformers, reference = saved_reference(tmp_path / "hf", layout)
    _, flags, _, architecture = LAYOUTS[layout]

    def outputs(model):
        with torch.no_grad():
            result = model(input_ids=torch.tensor(ROBERTA_TOKENS),
                           attention_mask=torch.tensor(ROBERTA_REAL.astype(np.int64)))
        return (result.logits if flags.get("with_mlm") else result.pooler_output).numpy()

    expected = outputs(reference)
    model = build_transformer_model(tmp_path / "hf" / "config.json", tmp_path / "hf",
                                    **{**flags, **({"with_mlm": "linear"} if flags.get("with_mlm") else {})})
    assert model.family == "hf_roberta"
    ours = model.predict([ROBERTA_TOKENS, np.zeros_like(ROBERTA_TOKENS)], verbose=0)
    if flags.get("with_mlm"):
        np.testing.assert_allclose(ours[ROBERTA_REAL], expected[ROBERTA_REAL], atol=1e-4)
    else:
        np.testing.assert_allclose(ours, expected, atol=1e-4)
    save_hf_weights(model, tmp_path / "kbert")
    again, info = getattr(transformers, architecture).from_pretrained(tmp_path / "kbert", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    np.testing.assert_allclose(outputs(again.eval()), expected, atol=1e-6)


def test_roberta_positions_do_not_move_with_padding(tmp_path):
    """Without transformers: a left- or right-padded text gives the hidden states it gives alone."""
    write_layout(tmp_path / "hf", "xlm-roberta_pooler")
    model = build_transformer_model(tmp_path / "hf" / "config.json", tmp_path / "hf")
    padded = model.predict([ROBERTA_TOKENS, np.zeros_like(ROBERTA_TOKENS)], verbose=0)
    for row, tokens in enumerate(ROBERTA_TOKENS):
        alone = model.predict([tokens[ROBERTA_REAL[row]][None], np.zeros((1, ROBERTA_REAL[row].sum()), int)],
                              verbose=0)
        np.testing.assert_allclose(padded[row][ROBERTA_REAL[row]], alone[0], atol=1e-5)
    # The position rows read are 2, 3, ... for the real tokens: not BERT's 0, 1, ...
    bert_like = build_transformer_model({**LAYOUTS["xlm-roberta_pooler"][0], "model_type": "bert",
                                         "pad_token_id": 1})
    bert_like.set_weights(model.get_weights())
    first = ROBERTA_TOKENS[:1]
    assert np.abs(bert_like.predict([first, np.zeros_like(first)], verbose=0)
                  - model.predict([first, np.zeros_like(first)], verbose=0)).max() > 1e-3


def test_the_two_robertas_are_kept_apart(tmp_path):
    """bert4keras's model='roberta' (BERT's layout) and Hugging Face's (`hf_roberta`) refuse each other's
    weights, each error naming the evidence; a config's model_type picks the family."""
    from kbert import ConfigError
    from kbert.models.registry import resolve

    write_layout(tmp_path / "hf", "roberta")
    assert resolve(tmp_path / "hf" / "config.json")[0].name == "hf_roberta"
    assert resolve({**CONFIG, "model_type": "bert"}, model="roberta")[0].name == "roberta"
    with pytest.raises(ConfigError, match="key 'model_type' is 'roberta' but model='roberta' was asked for "
                                          "\\(Hugging Face's RoBERTa \\(model='hf_roberta'\\) numbers positions"):
        resolve(tmp_path / "hf" / "config.json", model="roberta")
    bert = build_transformer_model({**CONFIG, "model_type": "bert"})
    save_hf_weights(bert, tmp_path / "bert")
    roberta = build_transformer_model(tmp_path / "hf" / "config.json")
    with pytest.raises(CheckpointError, match="not Hugging Face's RoBERTa layout "
                                              "\\(model_type 'bert' in .*config.json\\).*Nothing was loaded"):
        load_hf_weights(roberta, tmp_path / "bert")
    with pytest.raises(CheckpointError, match="kbert writes no Google checkpoint of it"):
        from kbert.checkpoints.google import save_google_checkpoint
        save_google_checkpoint(roberta, tmp_path / "google" / "model.ckpt")


def test_kbert_train_refuses_hugging_face_roberta_with_a_wordpiece_vocabulary_before_writing_anything(tmp_path, capsys):
    from kbert.cli.main import main

    write_layout(tmp_path / "hf", "xlm-roberta_pooler")
    data = tmp_path / "train.tsv"
    data.write_text("good\t1\nbad\t0\n", encoding="utf-8")
    code = main(["train", "--config", str(tmp_path / "hf" / "config.json"), "--vocab",
                 str(shared_path("vocab", "chinese_vocab.txt")), "--train", str(data), "--out", str(tmp_path / "out"),
                 "--maxlen", "16"])
    assert code != 0 and not (tmp_path / "out").exists()
    assert "is tokenized by its own tokenizer.json (its padding id and its pieces" in capsys.readouterr().err
