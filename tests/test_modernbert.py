"""ModernBERT (`model_type` modernbert): its layers, its sliding windows computed block by block, its Hugging Face
layout both ways, its analytic table, and (in the parity venv) transformers' outputs and sentence-transformers'
vectors on random models that they build."""

import json

import keras
import numpy as np
import pytest

from kbert import build_transformer_model, save_hf_weights
from kbert.analysis.params import analyze
from kbert.analysis.summary import crosscheck
from kbert.layers import GatedFeedForward, RotarySelfAttention, windowed_attention
from kbert.models.config import bundled_config_path
from kbert.models.registry import resolve
from test_hf_families import assert_transformers_parity, padded_rows, written_back

V, H, I = 60, 16, 24
# Four blocks, global on 0 and 3; a window of ±2 tokens, so rows of 11 tokens cross several of its blocks.
CONFIG = {"model_type": "modernbert", "vocab_size": V, "hidden_size": H, "num_hidden_layers": 4,
          "num_attention_heads": 2, "intermediate_size": I, "max_position_embeddings": 64, "local_attention": 4,
          "global_attn_every_n_layers": 3, "pad_token_id": 0, "hidden_activation": "gelu", "norm_eps": 1e-5,
          "initializer_range": 0.3}  # at 0.02 an error of position or θ stays under 1e-4


def backbone_names(layers=4):
    names = {"embeddings.tok_embeddings.weight": (V, H), "embeddings.norm.weight": (H,), "final_norm.weight": (H,)}
    for index in range(layers):
        scope = f"layers.{index}"
        if index:
            names[f"{scope}.attn_norm.weight"] = (H,)
        names.update({f"{scope}.attn.Wqkv.weight": (3 * H, H), f"{scope}.attn.Wo.weight": (H, H),
                      f"{scope}.mlp_norm.weight": (H,), f"{scope}.mlp.Wi.weight": (2 * I, H),
                      f"{scope}.mlp.Wo.weight": (H, I)})
    return names


LAYOUTS = {
    "modernbert_mlm": (CONFIG, {"with_mlm": True},
                       {**{f"model.{name}": shape for name, shape in backbone_names().items()},
                        "head.dense.weight": (H, H), "head.norm.weight": (H,), "decoder.bias": (V,)},
                       "ModernBertForMaskedLM"),
    "modernbert": (CONFIG, {}, backbone_names(), "ModernBertModel"),
}


# --- the layers --------------------------------------------------------------------------------------------------

def full_attention(q, k, v, keep, window):
    """NumPy: each query over every allowed key of the whole [length, length] matrix (|i − j| ≤ window)."""
    length = q.shape[1]
    distance = np.abs(np.arange(length)[None, :] - np.arange(length)[:, None])
    allowed = (distance <= window)[None] & keep[:, None, :]
    scores = np.einsum("bqhd,bkhd->bhqk", q, k)
    scores = np.where(allowed[:, None], scores, -1e9)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", probs, v)


@pytest.mark.parametrize("length", [3, 4, 5, 8, 13])
def test_the_window_block_by_block_is_the_masked_full_matrix(length):
    """Lengths below, at and above the window (±4) and its blocks, with padding in the second row."""
    rng = np.random.default_rng(length)
    q, k, v = (rng.normal(size=(2, length, 2, 3)).astype(np.float32) for _ in range(3))
    keep = np.ones((2, length), bool)
    keep[1, length - 2:] = False
    ours = keras.ops.convert_to_numpy(windowed_attention(q, k, v, keep, 4))
    expected = full_attention(q, k, v, keep, 4)
    np.testing.assert_allclose(ours[0], expected[0], atol=1e-5)
    np.testing.assert_allclose(ours[1][keep[1]], expected[1][keep[1]], atol=1e-5)  # real tokens' rows
    assert np.isfinite(ours).all()


def test_a_window_as_wide_as_the_row_is_the_whole_row():
    x = keras.random.normal((2, 9, 8), seed=4)
    whole = RotarySelfAttention(num_heads=2, head_size=4, rope_theta=100.0)
    local = RotarySelfAttention(num_heads=2, head_size=4, rope_theta=100.0, window=9)
    whole(x), local(x)
    local.set_weights(whole.get_weights())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(local(x)), keras.ops.convert_to_numpy(whole(x)), atol=1e-5)
    narrow = RotarySelfAttention(num_heads=2, head_size=4, rope_theta=100.0, window=2)
    narrow(x)
    narrow.set_weights(whole.get_weights())
    assert not np.allclose(keras.ops.convert_to_numpy(narrow(x)), keras.ops.convert_to_numpy(whole(x)), atol=1e-3)


@pytest.mark.parametrize("layer", [lambda: RotarySelfAttention(2, 4, rope_theta=1000.0),
                                   lambda: RotarySelfAttention(2, 4, rope_theta=1000.0, window=2, use_bias=True),
                                   lambda: GatedFeedForward(12, activation="gelu")],
                         ids=["global", "windowed", "geglu"])
def test_layer_contract(layer, tmp_path):
    assert_layer_contract(layer(), tmp_path)


def assert_layer_contract(layer, tmp_path):
    """Shapes, masks (padding appended changes no real token's output), get_config round trip, .keras with
    safe_mode=True."""
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)
    model = keras.Model(tokens, layer(hidden))
    ids = np.array([[5, 6, 7, 8, 9, 0], [8, 9, 10, 0, 0, 0]])
    output = model.predict(ids, verbose=0)
    assert output.shape == (2, 6, 8)
    longer = model.predict(np.pad(ids, [(0, 0), (0, 3)]), verbose=0)
    np.testing.assert_allclose(longer[:, :6][ids > 0], output[ids > 0], atol=1e-5)
    clone = type(layer).from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    model.save(tmp_path / "model.keras")
    restored = keras.models.load_model(tmp_path / "model.keras", safe_mode=True)
    np.testing.assert_allclose(restored.predict(ids, verbose=0), output, atol=1e-6)


# --- the family --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, total", [("modernbert_base", 149_655_232), ("modernbert_large", 395_881_664),
                                         ("mmbert_base", 307_786_240)])
def test_the_analytic_table_is_the_built_model_and_transformers_count(name, total):
    """With the MLM head; the totals are what transformers counts for ModernBertForMaskedLM of these configs."""
    analysis = analyze(resolve(bundled_config_path(name))[1], with_mlm=True)
    assert analysis.total == total
    if name == "modernbert_base":  # building the large one takes a while; its table is the same code
        model = build_transformer_model(bundled_config_path(name), with_mlm=True)
        assert all(row.ok for row in crosscheck(analysis, model)) and model.count_params() == total


def test_the_hubs_keys_and_transformers_5s_read_alike():
    _, hub = resolve(CONFIG)
    written = {key: value for key, value in CONFIG.items() if key not in ("global_attn_every_n_layers",)}
    _, transformers5 = resolve({**written, "layer_types": ["full_attention", "sliding_attention",
                                                           "sliding_attention", "full_attention"],
                                "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                                                    "sliding_attention": {"rope_type": "default",
                                                                          "rope_theta": 10000.0}}})
    assert hub == transformers5 and hub.window == 2
    assert [layer.window for layer in build_transformer_model(CONFIG).layers
            if isinstance(layer, RotarySelfAttention)] == [None, 2, 2, None]


@pytest.mark.parametrize("key, value, message", [
    ("layer_types", ["full_attention"], "expected one of 'full_attention', 'sliding_attention' for each of the 4"),
    ("local_attention", 5, "expected an even whole number"),
    ("classifier_pooling", "max", "expected 'cls' or 'mean'"),
])
def test_keys_kbert_cannot_build_are_named(key, value, message):
    from kbert import ConfigError

    with pytest.raises(ConfigError, match=f"key '{key}': {message}"):
        resolve({**CONFIG, key: value})


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layout_loads_and_is_written_back_byte_for_byte(tmp_path, layout):
    model, tensors, saved = written_back(tmp_path, layout, LAYOUTS)
    qkv = {variable.path: variable for variable in model.weights}["Transformer-1-MultiHeadSelfAttention/qkv/kernel"]
    name = next(name for name in tensors if name.endswith("layers.1.attn.Wqkv.weight"))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(qkv), tensors[name].T)
    assert saved["layer_types"] == ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    assert saved["local_attention"] == 4 and saved["rope_parameters"]["full_attention"]["rope_theta"] == 160000.0


# --- parity with transformers ------------------------------------------------------------------------------------

TOKENS, REAL = padded_rows(V, lowest=3, length=11, second_real=7)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parity
def test_same_outputs_as_transformers_both_ways_and_sharded(tmp_path, layout):
    """Rows of 11 tokens, one padded, through global blocks and windows of ±2 (several of its blocks)."""
    assert_transformers_parity(tmp_path, LAYOUTS[layout], TOKENS, REAL)


# --- sentence-transformers folders and kbert's tasks on ModernBERT -------------------------------------------------

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
             "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
             "A long sentence, so that its tokens reach past the window of the local layers on either side."]


def modernbert_folder(folder):
    """A random ModernBERT (kbert's weights) with ModernBERT's kind of tokenizer.json: byte-level BPE, [CLS] A [SEP]
    (B [SEP]), padded with [PAD], trained here on SENTENCES."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator(SENTENCES * 4, trainers.BpeTrainer(
        vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer.decoder = decoders.ByteLevel()
    keras.utils.set_random_seed(6)
    save_hf_weights(build_transformer_model({**CONFIG, "vocab_size": tokenizer.get_vocab_size()}), folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "[PAD]", "cls_token": "[CLS]", "sep_token": "[SEP]",
        "unk_token": "[UNK]", "mask_token": "[MASK]", "model_input_names": ["input_ids", "attention_mask"]}))
    return folder


def modernbert_embedder_folder(folder):
    from kbert.embeddings.folders import write_modules

    modernbert_folder(folder)
    write_modules(str(folder), "mean", H, [], True, 64)
    return folder


def test_a_modernbert_embedder_gives_each_text_the_vector_it_gets_alone(tmp_path):
    from kbert.embeddings.embedder import Embedder

    embedder = Embedder.load(modernbert_embedder_folder(tmp_path / "modernbert"))
    assert embedder.backbone.family == "modernbert" and embedder.tokenizer.pad_token_id == 0
    together = embedder.encode(SENTENCES, batch_size=len(SENTENCES))
    alone = np.concatenate([embedder.encode([text]) for text in SENTENCES])
    np.testing.assert_allclose(together, alone, atol=1e-5)


@pytest.mark.parity
def test_a_modernbert_embedder_matches_sentence_transformers_both_ways(tmp_path):
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install sentence-transformers "
                                                "(with torch) for the parity tests")
    from kbert.embeddings.embedder import Embedder

    folder = modernbert_embedder_folder(tmp_path / "modernbert")
    reference = sentence_transformers.SentenceTransformer(str(folder), device="cpu").encode(SENTENCES)
    embedder = Embedder.load(folder)
    assert np.abs(embedder.encode(SENTENCES) - reference).max() <= 1e-5
    again = sentence_transformers.SentenceTransformer(embedder.save(tmp_path / "saved"), device="cpu")
    assert np.abs(again.encode(SENTENCES) - reference).max() <= 1e-5


@pytest.mark.parametrize("pooling, bias", [("mean", False), ("cls", True)])
@pytest.mark.parity
def test_a_modernbert_cross_encoder_scores_as_transformers_and_sentence_transformers(tmp_path, pooling, bias):
    """ModernBertForSequenceClassification with one label: its classifier_pooling (the real tokens' mean, or the
    first token), then head.dense, GELU and head.norm, then classifier (gte-reranker-modernbert-base's layout)."""
    torch = pytest.importorskip("torch", reason="the parity extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the parity extra is not installed")
    from test_distilbert_mpnet import assert_cross_encoder_parity

    folder = modernbert_folder(tmp_path / pooling)
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(**{**CONFIG, "vocab_size": vocab, "num_labels": 1, "initializer_range": 0.2,
                                                  "classifier_pooling": pooling, "classifier_bias": bias})
    transformers.ModernBertForSequenceClassification(config).eval().save_pretrained(folder)
    reranker = assert_cross_encoder_parity(folder, [SENTENCES[0]] * 3, SENTENCES[1:4], told_apart=True)
    assert type(reranker.model.get_layer("Pooler")).__name__ == {"mean": "Pooling", "cls": "TakeToken"}[pooling]
    assert not reranker.model.get_layer("Classifier-Norm").get_config()["center"]  # norm_bias false


@pytest.mark.parity
def test_a_modernbert_reranker_kbert_trains_is_a_cross_encoder_sentence_transformers_reads(tmp_path):
    from test_distilbert_mpnet import assert_a_trained_reranker_is_a_cross_encoder

    assert_a_trained_reranker_is_a_cross_encoder(modernbert_folder(tmp_path / "hf"), tmp_path)


@pytest.mark.examples  # a whole run (tens of seconds): CI's example step runs it
def test_a_modernbert_classifier_trains_from_the_cli(tmp_path):
    from kbert.cli.main import main
    from kbert.tasks.classification import load_classifier

    folder = modernbert_folder(tmp_path / "hf")
    rows = [f"{text}\t{int('man' in text.split())}" for text in SENTENCES] * 6
    (tmp_path / "labelled.tsv").write_text("\n".join(rows) + "\n")
    assert main(["train", "--checkpoint", str(folder), "--train", str(tmp_path / "labelled.tsv"), "--valid",
                 str(tmp_path / "labelled.tsv"), "--out", str(tmp_path / "run"), "--epochs", "6", "--lr", "3e-3",
                 "--maxlen", "32", "--batch-size", "8"]) == 0
    state = json.loads((tmp_path / "run" / "training.json").read_text())
    assert state["options"]["model"] == "modernbert" and state["best_val_accuracy"] == 1.0
    assert load_classifier(str(tmp_path / "run")).tokenizer.pad_token_id == 0
