"""The rotary post-norm encoders: Jina-embeddings-v3 (`jina_embeddings_v3`), GTE v1.5 / mGTE (`gte`) and NomicBERT
(`nomic_bert`). Their layers, the hub's tensor names both ways (transformers 5 writes them too, renaming as it
loads), their analytic tables, and (in the parity venv) transformers' outputs on random models that it builds.

The random models are drawn with `initializer_range` 0.3, so that the rotary positions move the outputs well past
the tolerance (a rotation of the wrong halves, or GTE's up and gate swapped, fails)."""

import json

import keras
import numpy as np
import pytest

from kbert import ConfigError, build_transformer_model
from kbert.analysis.params import analyze
from kbert.analysis.summary import crosscheck
from kbert.layers import GatedFeedForward, RotarySelfAttention
from kbert.models.config import bundled_config_path
from kbert.models.registry import resolve
from test_hf_families import assert_transformers_parity, write_layout, written_back
from test_modernbert import assert_layer_contract

V, H, I = 60, 16, 24
BASE = {"vocab_size": V, "hidden_size": H, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": I,
        "max_position_embeddings": 64, "initializer_range": 0.3}
CONFIGS = {
    "jina": {**BASE, "model_type": "jina_embeddings_v3", "pad_token_id": 1},
    "gte": {**BASE, "model_type": "gte", "pad_token_id": 1, "type_vocab_size": 0},  # gte-base-en-v1.5: no segments
    "gte_segments": {**BASE, "model_type": "gte", "pad_token_id": 0, "type_vocab_size": 1},
    "nomic": {**BASE, "model_type": "nomic_bert", "pad_token_id": 0},
    # transformers' linear scaling (what GTE v1.5's fixed NTK scaling is, `kbert.models.gte.config.from_new_keys`)
    "gte_linear": {**BASE, "model_type": "gte", "pad_token_id": 1, "type_vocab_size": 0,
                   "rope_parameters": {"rope_type": "linear", "rope_theta": 20000.0, "factor": 1.7}},
}


def linear(name, rows, columns, bias=True):
    return {f"{name}.weight": (rows, columns), **({f"{name}.bias": (rows,)} if bias else {})}


def norm(name):
    return {f"{name}.weight": (H,), f"{name}.bias": (H,)}


def backbone(kind, segments=1):
    """The hub's names (and transformers 5's files): Jina's flash XLM-R, Alibaba's "new" model, Nomic's."""
    names = {"embeddings.word_embeddings.weight": (V, H),
             **({"embeddings.token_type_embeddings.weight": (segments, H)} if segments else {})}
    for index in range(2):
        if kind == "gte":
            scope = f"encoder.layer.{index}"
            names.update({**linear(f"{scope}.attention.qkv_proj", 3 * H, H), **linear(f"{scope}.attention.o_proj", H, H),
                          **norm(f"{scope}.attn_ln"), **linear(f"{scope}.mlp.up_gate_proj", 2 * I, H, bias=False),
                          **linear(f"{scope}.mlp.down_proj", H, I), **norm(f"{scope}.mlp_ln")})
            continue
        scope = f"encoder.layers.{index}"
        bias = kind == "jina"
        attention = "mixer" if kind == "jina" else "attn"
        names.update({**linear(f"{scope}.{attention}.Wqkv", 3 * H, H, bias),
                      **linear(f"{scope}.{attention}.out_proj", H, H, bias), **norm(f"{scope}.norm1"),
                      **norm(f"{scope}.norm2")})
        if kind == "jina":
            names.update({**linear(f"{scope}.mlp.fc1", I, H), **linear(f"{scope}.mlp.fc2", H, I)})
        else:
            names.update({**linear(f"{scope}.mlp.fc11", I, H, False), **linear(f"{scope}.mlp.fc12", I, H, False),
                          **linear(f"{scope}.mlp.fc2", H, I, False)})
    return {**names, **norm("embeddings.LayerNorm" if kind == "gte" else "emb_ln")}


def prefixed(prefix, names):
    return {f"{prefix}.{name}": shape for name, shape in names.items()}


LAYOUTS = {
    "jina_pooler": (CONFIGS["jina"], {"with_pool": True}, {**backbone("jina"), **linear("pooler.dense", H, H)},
                    "JinaEmbeddingsV3Model"),
    "jina_mlm": (CONFIGS["jina"], {"with_mlm": True},
                 {**prefixed("roberta", backbone("jina")), **linear("lm_head.dense", H, H), **norm("lm_head.layer_norm"),
                  "lm_head.bias": (V,)}, "JinaEmbeddingsV3ForMaskedLM"),
    "gte": (CONFIGS["gte"], {}, backbone("gte", segments=0), "GteModel"),
    "gte_linear": (CONFIGS["gte_linear"], {}, backbone("gte", segments=0), "GteModel"),
    "gte_mlm": (CONFIGS["gte_segments"], {"with_mlm": True},
                {**prefixed("gte", backbone("gte")), **linear("lm_head.dense", H, H), **norm("lm_head.norm"),
                 "lm_head.decoder.bias": (V,)}, "GteForMaskedLM"),
    "nomic": (CONFIGS["nomic"], {}, backbone("nomic", segments=2), "NomicBertModel"),
    "nomic_mlm": (CONFIGS["nomic"], {"with_mlm": True},
                  {**prefixed("nomic_bert", backbone("nomic", segments=2)),
                   **linear("cls.predictions.transform.dense", H, H), **norm("cls.predictions.transform.layer_norm"),
                   "cls.predictions.bias": (V,)}, "NomicBertForMaskedLM"),
}


# --- the layers --------------------------------------------------------------------------------------------------

def test_grouped_query_attention_is_multi_head_attention_with_shared_heads():
    """Two query heads reading one key/value head give what four-projection attention gives with that head's key
    and value weights copied for both: transformers' repeat_kv."""
    x = keras.random.normal((2, 7, 8), seed=3)
    grouped = RotarySelfAttention(num_heads=2, head_size=4, num_key_value_heads=1, fused_qkv=False, use_bias=True)
    full = RotarySelfAttention(num_heads=2, head_size=4, fused_qkv=False, use_bias=True)
    grouped(x), full(x)
    assert [tuple(w.shape) for w in grouped.weights][:6] == [(8, 8), (8,), (8, 4), (4,), (8, 4), (4,)]
    weights = [keras.ops.convert_to_numpy(w) for w in grouped.weights]
    query, query_bias, key, key_bias, value, value_bias, output, output_bias = weights
    full.set_weights([query, query_bias, np.tile(key, 2), np.tile(key_bias, 2), np.tile(value, 2),
                      np.tile(value_bias, 2), output, output_bias])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(grouped(x)), keras.ops.convert_to_numpy(full(x)), atol=1e-5)


def test_four_projections_are_the_fused_one():
    x = keras.random.normal((1, 5, 8), seed=5)
    fused = RotarySelfAttention(num_heads=2, head_size=4)
    apart = RotarySelfAttention(num_heads=2, head_size=4, fused_qkv=False)
    fused(x), apart(x)
    qkv, output = (keras.ops.convert_to_numpy(w) for w in fused.weights)
    apart.set_weights([qkv[:, :8], qkv[:, 8:16], qkv[:, 16:], output])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(apart(x)), keras.ops.convert_to_numpy(fused(x)), atol=1e-5)


def test_a_glu_kept_apart_is_the_fused_one():
    x = keras.random.normal((2, 3, 4), seed=6)
    fused = GatedFeedForward(6, activation="silu")
    apart = GatedFeedForward(6, activation="silu", fused=False)
    fused(x), apart(x)
    both, output = (keras.ops.convert_to_numpy(w) for w in fused.weights)
    apart.set_weights([both[:, :6], both[:, 6:], output])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(apart(x)), keras.ops.convert_to_numpy(fused(x)), atol=1e-6)


@pytest.mark.parametrize("layer", [
    lambda: RotarySelfAttention(4, 2, rope_theta=1000.0, num_key_value_heads=2, fused_qkv=False, use_bias=True),
    lambda: GatedFeedForward(12, activation="silu", fused=False, output_bias=True)], ids=["grouped", "glu_apart"])
def test_layer_contract(layer, tmp_path):
    assert_layer_contract(layer(), tmp_path)


# --- the families ------------------------------------------------------------------------------------------------

# Each total is what transformers counts for the same config (GteModel, NomicBertModel, ...ForMaskedLM).
@pytest.mark.parametrize("name, flags, total", [
    ("jina_embeddings_v3", {"with_pool": True}, 559_364_096), ("jina_embeddings_v3", {"with_mlm": True}, 559_616_146),
    ("gte_base_en_v1_5", {}, 136_776_192), ("gte_base_en_v1_5", {"with_mlm": True}, 137_398_848),
    ("gte_multilingual_base", {}, 305_368_320),
    ("nomic_embed_text_v1_5", {}, 136_731_648), ("nomic_embed_text_v1_5", {"with_mlm": True}, 137_354_304)])
def test_the_analytic_table_is_transformers_count(name, flags, total):
    analysis = analyze(resolve(bundled_config_path(name))[1], **flags)
    assert analysis.total == total
    if name == "gte_base_en_v1_5" and not flags:  # one built: the tables are one code
        model = build_transformer_model(bundled_config_path(name))
        assert all(row.ok for row in crosscheck(analysis, model)) and model.count_params() == total


@pytest.mark.parametrize("changed, message", [
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0}},
     "key 'rope_parameters': rope_type 'yarn' scales the rotary positions; kbert builds rope_type 'default' or "
     "'linear'"),
    ({"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": 0}},
     "key 'rope_parameters': factor 0: expected a positive number"),
    ({"head_dim": 4}, "key 'head_dim': 4 is not hidden_size / num_attention_heads"),
    ({"rope_theta": 0.5}, "key 'rope_theta': expected a number > 1"),
    ({"num_attention_heads": 16}, "key 'num_attention_heads': hidden_size 16 / 16 heads = 1 features"),
])
def test_keys_kbert_cannot_build_are_named(changed, message):
    with pytest.raises(ConfigError, match=message):
        resolve({**CONFIGS["nomic"], **changed})


def test_gte_without_segments_takes_them_and_reads_none():
    model = build_transformer_model(CONFIGS["gte"])
    assert [tensor.name for tensor in model.inputs] == ["Input-Token", "Input-Segment"]
    assert "Embedding-Segment" not in [layer.name for layer in model.layers]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layout_loads_and_is_written_back_byte_for_byte(tmp_path, layout):
    model, tensors, saved = written_back(tmp_path, layout, LAYOUTS)
    assert saved["rope_parameters"] == LAYOUTS[layout][0].get("rope_parameters", {
        "rope_type": "default", "rope_theta": model.get_layer("Transformer-0-MultiHeadSelfAttention").rope_theta})
    if layout.startswith("gte"):  # one up_gate_proj: up (linear) first, gate (activated) second
        weights = {variable.path: keras.ops.convert_to_numpy(variable) for variable in model.weights}
        fused = next(value for name, value in tensors.items() if name.endswith("layer.1.mlp.up_gate_proj.weight"))
        np.testing.assert_array_equal(weights["Transformer-1-FeedForward/up/kernel"], fused[:I].T)
        np.testing.assert_array_equal(weights["Transformer-1-FeedForward/gate/kernel"], fused[I:].T)


# --- the hub's own configs (their remote code's): Nomic's keys, Alibaba's "new" ---------------------------------

#: nomic-embed-text's config.json as Nomic's code writes it (a GPT2Config), for the "nomic" config above
NOMIC_OWN = {"model_type": "nomic_bert", "vocab_size": V, "n_embd": H, "n_layer": 2, "n_head": 2, "n_inner": I,
             "n_positions": 64, "initializer_range": 0.3, "rotary_emb_base": 1000, "rotary_emb_fraction": 1.0,
             "rotary_emb_interleaved": False, "rotary_scaling_factor": None, "activation_function": "swiglu",
             "qkv_proj_bias": False, "mlp_fc1_bias": False, "mlp_fc2_bias": False, "prenorm": False,
             "parallel_block": False, "use_rms_norm": False, "causal": False, "layer_norm_epsilon": 1e-12,
             "type_vocab_size": 2, "max_trained_positions": 2048, "use_flash_attn": True, "fused_bias_fc": True}
#: gte-*-v1.5 / gte-multilingual's config.json as Alibaba's code writes it, for the "gte" config above
NEW_OWN = {"model_type": "new", "vocab_size": V, "hidden_size": H, "num_hidden_layers": 2, "num_attention_heads": 2,
           "intermediate_size": I, "max_position_embeddings": 64, "initializer_range": 0.3, "pad_token_id": 1,
           "type_vocab_size": 0, "position_embedding_type": "rope", "rope_theta": 160000.0, "rope_scaling": None,
           "layer_norm_type": "layer_norm", "logn_attention_scale": False, "pack_qkv": True, "unpad_inputs": True,
           "use_memory_efficient_attention": True}


@pytest.mark.parametrize("own, native", [(NOMIC_OWN, "nomic"), (NEW_OWN, "gte"),
                                         ({**NOMIC_OWN, "n_inner": None}, "nomic")], ids=["nomic", "new", "n_inner"])
def test_the_hubs_own_configs_are_transformers_5s(own, native):
    """nomic-ai's and Alibaba-NLP's folders ship their remote code's config.json: the same model as transformers 5's
    keys (GPT-2's rule where n_inner is null: 4 × n_embd)."""
    family, config = resolve(own)
    expected = {**CONFIGS[native], **({"intermediate_size": 4 * H} if own.get("n_inner", I) is None else {})}
    native_family, native_config = resolve(expected)
    assert (family.name, config) == (native_family.name, native_config)


def test_gte_v1_5s_ntk_scaling_turns_positions_as_alibabas_code():
    """gte-base-en-v1.5's `rope_scaling` {"type": "ntk", "factor": 2}: Alibaba's code (read by hand) turns position
    p of feature i by p · (θ·f)^(−2i/d) / f^(2/d); kbert's attention layer by the same angles."""
    from kbert.layers import rotary_cos_sin

    model = build_transformer_model({**NEW_OWN, "rope_theta": 500000.0, "rope_scaling": {"type": "ntk", "factor": 2.0}})
    layer = model.get_layer("Transformer-0-MultiHeadSelfAttention")
    d, f = H // 2, 2.0
    inverse = 1.0 / (500000.0 * f) ** (np.arange(0, d, 2) / d) / f ** (2 / d)
    angles = np.arange(40)[:, None] * inverse[None, :]
    cos, sin = rotary_cos_sin(40, d, layer.rope_theta, factor=layer.rope_factor)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(cos), np.cos(np.concatenate([angles, angles], 1)), atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(sin), np.sin(np.concatenate([angles, angles], 1)), atol=1e-5)


def test_gte_files_of_alibabas_task_models_load_under_new(tmp_path):
    """Alibaba's NewForMaskedLM files hold the backbone under `new.`: read as transformers 5's `gte.`."""
    from safetensors.numpy import load_file, save_file

    tensors = write_layout(tmp_path / "gte", "gte_mlm", LAYOUTS)
    (tmp_path / "new").mkdir()
    save_file({name.replace("gte.", "new.", 1): value for name, value in tensors.items()},
              str(tmp_path / "new" / "model.safetensors"), metadata={"format": "pt"})
    own = {**NEW_OWN, "type_vocab_size": 1, "pad_token_id": 0}
    (tmp_path / "new" / "config.json").write_text(json.dumps(own))
    tokens = np.random.default_rng(1).integers(3, V, (2, 9))
    expected = build_transformer_model(tmp_path / "gte" / "config.json", tmp_path / "gte", with_mlm=True)
    ours = build_transformer_model(tmp_path / "new" / "config.json", tmp_path / "new", with_mlm=True)
    np.testing.assert_array_equal(ours.predict_on_batch([tokens, 0 * tokens]),
                                  expected.predict_on_batch([tokens, 0 * tokens]))
    assert set(load_file(str(tmp_path / "new" / "model.safetensors"))) != set(tensors)


@pytest.mark.parametrize("changed, message", [
    ({"qkv_proj_bias": True}, r"key 'qkv_proj_bias' is True; kbert builds NomicBERT with qkv_proj_bias False"),
    ({"rotary_emb_fraction": None}, r"key 'rotary_emb_fraction' is 0.0; .* rotary_emb_fraction 1.0"),  # the default
    ({"prenorm": True}, r"key 'prenorm' is True"),
    ({"rotary_scaling_factor": 2.0}, r"key 'rotary_scaling_factor' is 2.0"),
    ({"activation_function": "gelu"}, r"key 'activation_function' is 'gelu'; .* 'swiglu'"),
])
def test_nomics_settings_kbert_does_not_build_are_named(changed, message):
    own = {key: value for key, value in {**NOMIC_OWN, **changed}.items() if value is not None}
    with pytest.raises(ConfigError, match=message):
        resolve(own)


@pytest.mark.parametrize("changed, message", [
    ({"logn_attention_scale": True}, r"key 'logn_attention_scale' is True; kbert builds GTE with"),
    ({"layer_norm_type": "rms_norm"}, r"key 'layer_norm_type' is 'rms_norm'"),
    ({"pack_qkv": False}, r"key 'pack_qkv' is False"),
    ({"rope_scaling": {"type": "ntk", "factor": 2.0, "mixed_b": 0.5}}, r"key 'rope_scaling' .*fixed NTK"),
    ({"rope_scaling": {"type": "yarn", "factor": 2.0}}, r"key 'rope_scaling' .*fixed NTK"),
    ({"position_embedding_type": "absolute"}, r"kbert builds .*; got 'new'"),
])
def test_alibabas_settings_kbert_does_not_build_are_named(changed, message):
    with pytest.raises(ConfigError, match=message):
        resolve({**NEW_OWN, **changed})


# --- parity with transformers ------------------------------------------------------------------------------------

def tokens_padded_with(pad):
    tokens = np.random.default_rng(0).integers(3, V, (2, 11))
    tokens[1, 7:] = pad
    return tokens, tokens != pad


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parity
def test_same_outputs_as_transformers_both_ways_and_sharded(tmp_path, layout):
    tokens, real = tokens_padded_with(LAYOUTS[layout][0]["pad_token_id"])
    assert_transformers_parity(tmp_path, LAYOUTS[layout], tokens, real)


# --- sentence-transformers folders and CrossEncoders on these backbones --------------------------------------------

def transformers_folder(tmp_path, key, architecture, **changes):
    """A random `architecture` of `CONFIGS[key]` that transformers builds (seed 0), saved in a folder with a
    lower-casing WordPiece tokenizer.json ([PAD] 0, [CLS] A [SEP] B [SEP]) trained on a few sentences."""
    import json

    torch = pytest.importorskip("torch", reason="the parity extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the parity extra is not installed")
    from test_distilbert_mpnet import wordpiece_folder

    folder = wordpiece_folder(tmp_path / key, "distilbert")
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(**{**CONFIGS[key], "vocab_size": vocab, "pad_token_id": 0,
                                                  "initializer_range": 0.02, **changes})
    getattr(transformers, architecture)(config).eval().save_pretrained(folder)
    # As the hub's folders say it: NomicBERT's BertTokenizer gives a pair's second text segment 1; Jina's and
    # mGTE's XLM-R tokenizer gives no token_type_ids (their models have one segment).
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if config.type_vocab_size > 1 else [])
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                              "pad_token": "[PAD]", "cls_token": "[CLS]",
                                                              "sep_token": "[SEP]", "unk_token": "[UNK]",
                                                              "model_input_names": names}))
    return folder


@pytest.mark.parametrize("key, stem", [("jina", "JinaEmbeddingsV3"), ("gte_segments", "Gte"), ("nomic", "NomicBert")])
@pytest.mark.parity
def test_a_cross_encoder_scores_as_transformers_and_sentence_transformers(tmp_path, key, stem):
    """A one-label sequence classifier: Jina's is XLM-R's classification head, GTE's and NomicBERT's BERT's pooler
    and classifier. transformers' logits, and sentence-transformers' CrossEncoder scores, from kbert's reranker."""
    from test_distilbert_mpnet import SENTENCES, assert_cross_encoder_parity

    folder = transformers_folder(tmp_path, key, f"{stem}ForSequenceClassification", num_labels=1)
    reranker = assert_cross_encoder_parity(folder, [SENTENCES[0]] * 3, SENTENCES[1:4])
    assert reranker.model.get_layer("Transformer-0-MultiHeadSelfAttention").get_config()["rope_theta"] > 1


@pytest.mark.parametrize("key, stem", [("jina", "JinaEmbeddingsV3"), ("gte_segments", "Gte"), ("nomic", "NomicBert")])
@pytest.mark.parity
def test_an_embedder_with_prompts_matches_sentence_transformers_both_ways(tmp_path, key, stem):
    """nomic-embed-text's way: mean pooling, normalised, `search_query: ` / `search_document: ` prompts by name."""
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="the parity extra is not installed")
    from kbert.embeddings.folders import write_modules
    from kbert.embeddings.embedder import Embedder
    from test_distilbert_mpnet import SENTENCES

    folder = transformers_folder(tmp_path, key, f"{stem}Model")
    write_modules(str(folder), "mean", H, [], True, 64,
                  prompts={"query": "search_query: ", "document": "search_document: "})
    reference = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    embedder = Embedder.load(folder)
    for prompt in ("query", "document"):
        expected = reference.encode(SENTENCES, prompt_name=prompt)
        assert np.abs(embedder.encode(SENTENCES, prompt_name=prompt) - expected).max() <= 1e-5
    again = sentence_transformers.SentenceTransformer(embedder.save(tmp_path / "saved"), device="cpu")
    assert np.abs(again.encode(SENTENCES, prompt_name="query") - reference.encode(SENTENCES, prompt_name="query")
                  ).max() <= 1e-5


def gte_folder(tmp_path):
    """A random GTE of kbert's with its MLM head (its GLU written as up_gate_proj's two slices), two segments, and
    a WordPiece tokenizer.json."""
    import json

    from kbert import save_hf_weights
    from test_distilbert_mpnet import wordpiece_folder

    folder = wordpiece_folder(tmp_path / "hf", "distilbert")
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    config = {**CONFIGS["gte_segments"], "vocab_size": vocab, "initializer_range": 0.02, "type_vocab_size": 2}
    save_hf_weights(build_transformer_model(config, with_mlm=True), folder)
    return folder


# Every task trained, written and read back through the CLI: 33-50 s here, an example (CI runs it).
@pytest.mark.examples
def test_each_task_trains_from_the_cli_and_reads_back(tmp_path):
    """Pre-trained, fine-tuned to accuracy 1.0 and exported to ONNX (int8), an embedding model, a reranker written
    as GteForSequenceClassification and a CRF tagger, each read back."""
    from test_distilbert_mpnet import assert_every_task

    # A GLU drawn at 0.02 multiplies two small projections: the classifier takes longer to part the texts.
    assert_every_task(gte_folder(tmp_path), tmp_path, "gte", pad_token_id=0, cross_encoder="Gte", epochs=16)


@pytest.mark.parity
def test_a_gte_reranker_kbert_trains_is_a_cross_encoder_sentence_transformers_reads(tmp_path):
    from test_distilbert_mpnet import assert_a_trained_reranker_is_a_cross_encoder

    assert_a_trained_reranker_is_a_cross_encoder(gte_folder(tmp_path), tmp_path)


# --- Jina's own files: xlm-roberta with rotary positions, and task LoRA adapters ----------------------------------

TASKS = ["retrieval.query", "retrieval.passage", "separation", "classification", "text-matching"]


def jina_hub_folder(tmp_path, alpha=1, rank=2):
    """A random jina-embeddings-v3 in Jina's own layout: its config.json (model_type xlm-roberta, rotary positions
    with `rotary_emb_base`, `lora_*`), `roberta.` names, each Linear and Embedding weight stored as torch's
    parametrization (`...parametrizations.weight.original`) with five tasks' random low-rank pairs beside it; and
    the five tasks' weights merged here in NumPy, transformers 5's layout, keyed by task (None: the base)."""
    import json

    from kbert import save_hf_weights
    from safetensors.numpy import load_file, save_file

    keras.utils.set_random_seed(1)
    base = tmp_path / "base"
    save_hf_weights(build_transformer_model({**CONFIGS["jina"], "initializer_range": 0.02}, with_pool=True), base)
    tensors = load_file(base / "model.safetensors")
    rng = np.random.default_rng(2)
    hub, merged = {}, {task: {} for task in [None, *TASKS]}
    for name, value in tensors.items():
        merged[None][name] = value
        if not (name.endswith(".weight") and value.ndim == 2):
            hub[f"roberta.{name}"] = value
            for task in TASKS:
                merged[task][name] = value
            continue
        scope = f"roberta.{name[:-len('.weight')]}.parametrizations.weight"
        rows, columns = value.shape
        embedding = "embeddings" in name
        # Jina's shapes: a Linear's A [tasks, rank, in] and B [tasks, out, rank]; an Embedding's A [tasks, vocabulary,
        # rank] and B [tasks, rank, width].
        a = rng.normal(0, 0.5, (5, rows, rank) if embedding else (5, rank, columns)).astype(np.float32)
        b = rng.normal(0, 0.5, (5, rank, columns) if embedding else (5, rows, rank)).astype(np.float32)
        hub.update({f"{scope}.original": value, f"{scope}.0.lora_A": a, f"{scope}.0.lora_B": b})
        for index, task in enumerate(TASKS):
            update = a[index] @ b[index] if embedding else b[index] @ a[index]
            merged[task][name] = value + alpha / rank * update
    folder = tmp_path / "jina-embeddings-v3"
    folder.mkdir()
    save_file(hub, folder / "model.safetensors")
    config = json.loads((base / "config.json").read_text())
    config.pop("rope_parameters")
    config.update(model_type="xlm-roberta", architectures=["XLMRobertaLoRA"], position_embedding_type="rotary",
                  rotary_emb_base=20000.0, lora_adaptations=TASKS, lora_rank=rank, lora_alpha=alpha,
                  lora_dropout_p=0.0, load_trained_adapters=True, use_flash_attn=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder, merged


def jina_outputs(config_path, weights, adapter=None):
    """The pooled outputs of a jina-embeddings-v3 built from `config_path` with `weights` loaded (a folder, or a
    dict of transformers 5's tensors)."""
    from kbert import load_hf_weights
    from safetensors.numpy import save_file

    model = build_transformer_model(config_path, with_pool=True)
    if isinstance(weights, dict):
        path = config_path.parent / f"merged-{adapter}.safetensors"
        save_file(weights, path)
        weights, adapter = path, None
    load_hf_weights(model, weights, adapter=adapter)
    tokens, _ = tokens_padded_with(1)
    return keras.ops.convert_to_numpy(model.predict_on_batch([tokens, np.zeros_like(tokens)])[1])


def test_jinas_own_config_builds_jina_not_xlm_roberta(tmp_path):
    """Jina's config.json says xlm-roberta; its position_embedding_type says rotary. Before, kbert built an XLM-R
    with an 8,194-row position table out of it; a position type kbert does not compute is refused by name."""
    import json

    folder, _ = jina_hub_folder(tmp_path)
    family, config = resolve(folder / "config.json")
    assert (family.name, config.rope_theta, config.model_type) == ("jina_embeddings_v3", 20000.0, "jina_embeddings_v3")
    bert = json.loads((folder / "config.json").read_text())
    with pytest.raises(ConfigError, match="position_embedding_type.*'relative_key'.*'bert'"):
        resolve({**bert, "model_type": "bert", "position_embedding_type": "relative_key"})


def test_each_task_adapter_is_merged_as_jinas_lora_parametrization(tmp_path, caplog):
    """Each task's weights are the base's plus alpha / rank times B @ A (an Embedding's A @ B); no task: the base
    weights, with the adapters named in a warning. The tasks' outputs differ from each other and the base's."""
    folder, merged = jina_hub_folder(tmp_path, alpha=3, rank=2)
    config = folder / "config.json"
    with caplog.at_level("WARNING", logger="kbert"):
        base = jina_outputs(config, folder)
    assert "retrieval.query, retrieval.passage, separation, classification, text-matching" in caplog.text
    np.testing.assert_allclose(base, jina_outputs(config, merged[None]), atol=1e-6)
    outputs = {}
    for task in ("retrieval.query", "retrieval.passage", "text-matching"):
        outputs[task] = jina_outputs(config, folder, adapter=task)
        np.testing.assert_allclose(outputs[task], jina_outputs(config, merged[task], adapter=task), atol=1e-5)
        assert np.abs(outputs[task] - base).max() > 1e-2
    assert np.abs(outputs["retrieval.query"] - outputs["retrieval.passage"]).max() > 1e-2


def test_an_adapter_the_file_lacks_is_refused_by_name(tmp_path):
    from kbert import CheckpointError, load_hf_weights

    folder, _ = jina_hub_folder(tmp_path)
    model = build_transformer_model(folder / "config.json", with_pool=True)
    with pytest.raises(CheckpointError, match="no task adapter 'retrieval'; this file's are retrieval.query, "):
        load_hf_weights(model, folder, adapter="retrieval")
    with pytest.raises(CheckpointError, match="no task LoRA adapters in this file"):
        jina_outputs(folder / "config.json", tmp_path / "base", adapter="retrieval.query")


def as_sentence_transformer(folder, words: str) -> None:
    """Jina's files in `folder` made a sentence-transformers folder (mean pooling) with a word-level tokenizer.json
    of `words` (ids from 10), XLM-R's special tokens."""
    import json

    from kbert.embeddings.folders import write_modules
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocabulary = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, **{word: 10 + i for i, word in enumerate(words.split())}}
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_input_names": ["input_ids", "attention_mask"]}))
    write_modules(str(folder), "mean", H, [], True, 32)


def test_kbert_embed_and_serve_choose_the_adapter(tmp_path, capsys):
    """A sentence-transformers folder around Jina's files: `kbert embed --adapter` gives the task's vectors, which
    differ from the base weights'; `kbert serve --adapter` with a task the model lacks names the ones it has."""
    import json

    from test_distilbert_mpnet import cli

    folder, _ = jina_hub_folder(tmp_path)
    as_sentence_transformer(folder, "a b c")
    (tmp_path / "texts.txt").write_text("a b c\nc b\n")
    vectors = {}
    for adapter in (None, "retrieval.query"):
        assert cli("embed", "--model", folder, tmp_path / "texts.txt", *(["--adapter", adapter] if adapter else [])) == 0
        vectors[adapter] = np.array([json.loads(line)["embedding"] for line in capsys.readouterr().out.splitlines()])
    assert vectors[None].shape == (2, H) and np.abs(vectors[None] - vectors["retrieval.query"]).max() > 1e-3
    assert cli("serve", "--adapter", "retrieval", "--port", 0, folder) != 0
    assert "no task adapter 'retrieval'; this file's are retrieval.query, " in capsys.readouterr().err
