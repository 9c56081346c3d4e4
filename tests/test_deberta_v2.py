"""DeBERTa-v2/v3 (`model_type` deberta-v2): its disentangled attention and log-bucketed distances, its Hugging Face
layout both ways, its analytic table, and (in the parity venv) transformers' outputs and a cross-encoder's scores
on random models that transformers builds.

The random models are drawn with `initializer_range` 0.3: with transformers' 0.02 the position terms move the
outputs by about 1e-5, under the tolerance, so a wrong sign in p2c would pass unseen (it gives a difference of 7
at 0.3)."""

import json

import keras
import numpy as np
import pytest

from kbert import build_transformer_model
from kbert.analysis.params import analyze
from kbert.analysis.summary import crosscheck
from kbert.layers import DisentangledSelfAttention, RelativePositionTable, log_buckets
from kbert.models.config import bundled_config_path
from kbert.models.registry import resolve
from test_hf_families import assert_transformers_parity, padded_rows, written_back

V, H, I = 60, 16, 32
# Buckets of 8 reaching 16: rows of 30 tokens read log-bucketed distances.
CONFIG = {"model_type": "deberta-v2", "vocab_size": V, "hidden_size": H, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": I, "max_position_embeddings": 64, "type_vocab_size": 0,
          "relative_attention": True, "position_buckets": 8, "max_relative_positions": 16,
          "pos_att_type": ["p2c", "c2p"], "norm_rel_ebd": "layer_norm", "share_att_key": True,
          "position_biased_input": False, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
          "initializer_range": 0.3}


def linear(name, rows, columns):
    return {f"{name}.weight": (rows, columns), f"{name}.bias": (rows,)}


def layer_norm(name):
    return {f"{name}.weight": (H,), f"{name}.bias": (H,)}


def backbone_names(layers=2):
    names = {"embeddings.word_embeddings.weight": (V, H), **layer_norm("embeddings.LayerNorm"),
             "encoder.rel_embeddings.weight": (16, H), **layer_norm("encoder.LayerNorm")}
    for index in range(layers):
        scope = f"encoder.layer.{index}"
        for part in ("query_proj", "key_proj", "value_proj"):
            names.update(linear(f"{scope}.attention.self.{part}", H, H))
        names.update({**linear(f"{scope}.attention.output.dense", H, H),
                      **layer_norm(f"{scope}.attention.output.LayerNorm"), **linear(f"{scope}.intermediate.dense", I, H),
                      **linear(f"{scope}.output.dense", H, I), **layer_norm(f"{scope}.output.LayerNorm")})
    return names


LAYOUTS = {
    "deberta_v2_mlm": (CONFIG, {"with_mlm": True},
                       {**{f"deberta.{name}": shape for name, shape in backbone_names().items()},
                        "cls.predictions.bias": (V,), **linear("cls.predictions.transform.dense", H, H),
                        **layer_norm("cls.predictions.transform.LayerNorm")}, "DebertaV2ForMaskedLM"),
    "deberta_v2": (CONFIG, {}, backbone_names(), "DebertaV2Model"),
    # pos_att_type, norm_rel_ebd and position_biased_input left out: transformers' defaults (no position terms, no
    # norm of the relative table, absolute positions added), not v3's
    "deberta_v2_keys_left_out": ({key: value for key, value in CONFIG.items()
                                  if key not in ("pos_att_type", "norm_rel_ebd", "position_biased_input")}, {},
                                 {**{name: shape for name, shape in backbone_names().items()
                                     if not name.startswith("encoder.LayerNorm")},
                                  "embeddings.position_embeddings.weight": (64, H)}, "DebertaV2Model"),
    # deberta-v3's 256 buckets on a table of 128 positions: the buckets past the middle fall (transformers' formula)
    "deberta_v2_buckets_past_the_reach": ({**CONFIG, "position_buckets": 256, "max_relative_positions": -1,
                                           "max_position_embeddings": 128}, {},
                                          {**backbone_names(), "encoder.rel_embeddings.weight": (512, H)},
                                          "DebertaV2Model"),
}


# --- the layers --------------------------------------------------------------------------------------------------

def numpy_log_buckets(distances, buckets, max_position):
    """transformers' make_log_bucket_position, in NumPy (float64; transformers' float32 gives the same on these)."""
    sign, middle = np.sign(distances), buckets // 2
    size = np.where((distances < middle) & (distances > -middle), middle - 1, np.abs(distances)).astype(np.float64)
    far = np.ceil(np.log(size / middle) / np.log((max_position - 1) / middle) * (middle - 1)) + middle
    return np.where(size <= middle, distances, far * sign).astype(np.int64)


@pytest.mark.parametrize("buckets, reach", [(256, 512), (4, 8), (8, 16), (256, 128), (256, 100), (2, 512), (3, 512)])
def test_log_buckets_are_transformers(buckets, reach):
    """Every distance up to past the reach, the boundary (reach − 1, whose ratio is 1) included; beyond ±buckets
    (where the table is clipped) any bucket past it. Buckets past twice the reach (falling past the middle) and 2 or
    3 buckets (constant past it) once looped for ever."""
    distances = np.arange(-2 * reach - 90, 2 * reach + 91)
    ours = keras.ops.convert_to_numpy(log_buckets(distances, buckets, reach))
    np.testing.assert_array_equal(np.clip(ours, -buckets, buckets),
                                  np.clip(numpy_log_buckets(distances, buckets, reach), -buckets, buckets))


def numpy_disentangled(x, table, weights, heads, span, buckets, max_position, mask):
    """DeBERTa's attention in NumPy, as transformers writes it: c2p gathered at row span + bucket(i − j), p2c at
    span − bucket(i − j) per key, then transposed."""
    def project(values, part):
        out = values @ weights[f"{part}/kernel"] + weights[f"{part}/bias"]
        return out.reshape(*values.shape[:-1], heads, -1)

    q, k, v = project(x, "query"), project(x, "key"), project(x, "value")
    pos_k, pos_q = project(table, "key"), project(table, "query")
    length, size = x.shape[1], q.shape[-1]
    relative = numpy_log_buckets(np.arange(length)[:, None] - np.arange(length)[None, :], buckets, max_position)
    c2p_rows = np.clip(relative + span, 0, 2 * span - 1)
    p2c_rows = np.clip(-relative + span, 0, 2 * span - 1)
    scores = np.einsum("bqhd,bkhd->bhqk", q, k)
    c2p = np.einsum("bqhd,rhd->bhqr", q, pos_k)
    scores += np.take_along_axis(c2p, np.broadcast_to(c2p_rows, c2p.shape[:2] + c2p_rows.shape), -1)
    p2c = np.einsum("bkhd,rhd->bhkr", k, pos_q)
    scores += np.swapaxes(np.take_along_axis(p2c, np.broadcast_to(p2c_rows, p2c.shape[:2] + p2c_rows.shape), -1), -1, -2)
    scores = np.where(mask[:, None, None, :], scores / np.sqrt(3 * size), -1e9)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = np.einsum("bhqk,bkhd->bqhd", probs, v).reshape(*x.shape[:2], -1)
    return context @ weights["output/kernel"] + weights["output/bias"]


def test_disentangled_attention_is_transformers_formula_in_numpy():
    rng = np.random.default_rng(0)
    x, table = rng.normal(size=(2, 12, 8)).astype(np.float32), rng.normal(size=(8, 8)).astype(np.float32)
    mask = np.ones((2, 12), bool)
    mask[1, 9:] = False
    layer = DisentangledSelfAttention(num_heads=2, head_size=4, span=4, buckets=4, max_position=8,
                                      kernel_initializer=keras.initializers.RandomNormal(0, 0.5, seed=1))
    ours = keras.ops.convert_to_numpy(layer([x, table], mask=[mask, None]))
    weights = {variable.path.split("/", 1)[1]: keras.ops.convert_to_numpy(variable) for variable in layer.weights}
    expected = numpy_disentangled(x, table, weights, 2, 4, 4, 8, mask)
    np.testing.assert_allclose(ours[mask], expected[mask], atol=1e-4)


def test_layer_contract(tmp_path):
    """Shapes, masks (padding appended changes no real token's output), get_config round trips, .keras with
    safe_mode=True."""
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(50, 8, mask_zero=True)(tokens)
    table = RelativePositionTable(span=4, width=8, name="table")(hidden)
    attention = DisentangledSelfAttention(num_heads=2, head_size=4, span=4, buckets=4, max_position=8)
    model = keras.Model(tokens, attention([hidden, table]))
    ids = np.array([[5, 6, 7, 8, 9, 0], [8, 9, 10, 0, 0, 0]])
    output = model.predict(ids, verbose=0)
    assert output.shape == (2, 6, 8)
    longer = model.predict(np.pad(ids, [(0, 0), (0, 3)]), verbose=0)
    np.testing.assert_allclose(longer[:, :6][ids > 0], output[ids > 0], atol=1e-5)
    for layer in (attention, model.get_layer("table")):
        assert type(layer).from_config(layer.get_config()).get_config() == layer.get_config()
    model.save(tmp_path / "model.keras")
    restored = keras.models.load_model(tmp_path / "model.keras", safe_mode=True)
    np.testing.assert_allclose(restored.predict(ids, verbose=0), output, atol=1e-6)


# --- the family --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, total", [({}, 183_831_552), ({"with_mlm": True}, 184_551_780)])
def test_the_analytic_table_is_the_built_model_and_transformers_count(flags, total):
    """deberta-v3-base: DebertaV2Model and DebertaV2ForMaskedLM, as transformers counts them."""
    analysis = analyze(resolve(bundled_config_path("deberta_v3_base"))[1], **flags)
    model = build_transformer_model(bundled_config_path("deberta_v3_base"), **flags)
    assert all(row.ok for row in crosscheck(analysis, model))
    assert analysis.total == model.count_params() == total


@pytest.mark.parametrize("key, value, message", [
    ("share_att_key", False, "kbert projects the relative table with the attention's own query and key"),
    ("share_att_key", None, "kbert projects the relative table .* where the key is left out, is separate "
                            r"projections\) \(expected True, the key is left out\)"),
    ("relative_attention", None, "kbert builds DeBERTa with its relative attention, which transformers leaves off "
                                 "where the key is left out"),
    ("pos_att_type", 5, "expected terms of 'c2p' and 'p2c'"),
    ("position_buckets", "256", "expected a whole number, got '256'"),
    ("max_relative_positions", "16", "expected a whole number, got '16'"),
    ("position_buckets", 1, "1 leaves no distance unbucketed"),
    ("max_relative_positions", 1, "a reach of 1 with position_buckets 8"),
    ("max_relative_positions", 5, "a reach of 5 with position_buckets 8 .* other than 5"),
    ("conv_kernel_size", 3, "kbert has no convolution layer"),
    ("pos_att_type", ["p2p"], "expected terms of 'c2p' and 'p2c'"),
])
def test_keys_kbert_cannot_build_are_named(key, value, message):
    from kbert import ConfigError

    config = {name: setting for name, setting in CONFIG.items() if name != key}
    with pytest.raises(ConfigError, match=f"key '{key}': {message}"):
        resolve(config if value is None else {**config, key: value})


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layout_loads_and_is_written_back_byte_for_byte(tmp_path, layout):
    model, _, saved = written_back(tmp_path, layout, LAYOUTS)
    assert [tensor.name for tensor in model.inputs] == ["Input-Token", "Input-Segment"]
    config = LAYOUTS[layout][0]
    assert saved["pos_att_type"] == config.get("pos_att_type", [])
    assert saved["position_buckets"] == config["position_buckets"]
    assert saved["norm_rel_ebd"] == config.get("norm_rel_ebd", "none")


# --- parity with transformers ------------------------------------------------------------------------------------

TOKENS, REAL = padded_rows(V, lowest=3, length=30, second_real=20)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parity
def test_same_outputs_as_transformers_both_ways_and_sharded(tmp_path, layout):
    assert_transformers_parity(tmp_path, LAYOUTS[layout], TOKENS, REAL)


@pytest.mark.parity
def test_a_deberta_cross_encoder_scores_as_transformers_and_sentence_transformers(tmp_path):
    """DebertaV2ForSequenceClassification with one label: pooler.dense and GELU on [CLS], then the classifier;
    transformers' logits, and sentence-transformers' CrossEncoder scores, from kbert's reranker."""
    torch = pytest.importorskip("torch", reason="the parity extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the parity extra is not installed")
    from test_distilbert_mpnet import SENTENCES, assert_cross_encoder_parity, wordpiece_folder

    folder = tmp_path / "deberta"
    wordpiece_folder(folder, "distilbert")  # its WordPiece tokenizer.json ([PAD] 0, [CLS] A [SEP] B [SEP])
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(**{**CONFIG, "vocab_size": vocab, "num_labels": 1})
    transformers.DebertaV2ForSequenceClassification(config).eval().save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                              "pad_token": "[PAD]", "cls_token": "[CLS]",
                                                              "sep_token": "[SEP]", "unk_token": "[UNK]"}))
    reranker = assert_cross_encoder_parity(folder, [SENTENCES[0]] * 3, SENTENCES[1:4], told_apart=True)
    assert reranker.model.get_layer("Pooler-Dense").get_config()["activation"] == "gelu"


# --- DeBERTa-v3's spm.model, where a folder has no tokenizer.json ---------------------------------------------------

TEXTS = ["A man is eating food.", "Two  men pushed\tcarts through the woods!", "naïve café, déjà vu?",
         "The [MASK] is carrying a baby.", "Ünïcödé: Ｆｕｌｌｗｉｄｔｈ and ｶﾀｶﾅ", "trailing spaces   "]


def spm_folder(folder, lower=False):
    """A DeBERTa-v3 folder as microsoft/deberta-v3-base ships it: spm.model ([PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3)
    and tokenizer_config.json, no tokenizer.json; a random model of kbert's with the MLM head (vocab: the pieces
    and [MASK], as transformers adds it)."""
    import io

    import sentencepiece
    from kbert import save_hf_weights

    corpus = [text.lower() for text in TEXTS * 4] + ["the girl is playing drums", "a woman plays the violin"] * 10
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_writer=model, vocab_size=60, model_type="unigram", pad_id=0,
        pad_piece="[PAD]", bos_id=1, bos_piece="[CLS]", eos_id=2, eos_piece="[SEP]", unk_id=3, unk_piece="[UNK]",
        minloglevel=2, hard_vocab_limit=False)
    folder.mkdir()
    (folder / "spm.model").write_bytes(model.getvalue())
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "DebertaV2Tokenizer",
                                                              "do_lower_case": lower, "split_by_punct": False}))
    size = sentencepiece.SentencePieceProcessor(model_file=str(folder / "spm.model")).get_piece_size()
    keras.utils.set_random_seed(3)
    config = {**CONFIG, "vocab_size": size + 1, "pad_token_id": 0, "initializer_range": 0.02}
    save_hf_weights(build_transformer_model(config, with_mlm=True), folder)
    return folder


@pytest.mark.parity
@pytest.mark.parametrize("lower", [False, True])
def test_spm_model_tokenizes_as_transformers_deberta_tokenizer(tmp_path, lower):
    transformers = pytest.importorskip("transformers", reason="the parity extra is not installed")
    from kbert.tokenizers.tokenizer_json import folder_tokenizer

    folder = spm_folder(tmp_path / "deberta", lower)
    reference = transformers.AutoTokenizer.from_pretrained(str(folder))
    ours = folder_tokenizer(str(folder))
    for text in TEXTS:
        assert ours.encode(text)[0] == reference(text)["input_ids"], text
    pairs = ours.encode_all(TEXTS[:3], TEXTS[3:])
    expected = reference(TEXTS[:3], TEXTS[3:])
    assert [ids for ids, _ in pairs] == expected["input_ids"]
    assert [segments for _, segments in pairs] == expected["token_type_ids"]
    assert ours.mask_id == reference.mask_token_id and ours.pad_token_id == reference.pad_token_id == 0


def test_a_deberta_folder_with_spm_model_alone_trains_from_the_cli(tmp_path):
    """kbert train reads spm.model where there is no tokenizer.json, and the run keeps the tokenizer.json it built
    (its [MASK] after the pieces), which the classifier reads back."""
    from kbert.cli.main import main
    from kbert.tasks.classification import load_classifier

    folder = spm_folder(tmp_path / "deberta")
    rows = [f"{text.replace(chr(9), ' ')}\t{index % 2}" for index, text in enumerate(TEXTS)] * 4
    (tmp_path / "labelled.tsv").write_text("\n".join(rows) + "\n")
    assert main(["train", "--checkpoint", str(folder), "--train", str(tmp_path / "labelled.tsv"), "--out",
                 str(tmp_path / "run"), "--epochs", "1", "--maxlen", "32", "--batch-size", "8"]) == 0
    saved = json.loads((tmp_path / "run" / "tokenizer.json").read_text())
    assert saved["model"]["type"] == "Unigram" and {"[MASK]", "[CLS]"} <= {t["content"] for t in saved["added_tokens"]}
    classifier = load_classifier(str(tmp_path / "run"))
    assert classifier.tokenizer.encode("a man")[0][0] == 1 and len(classifier.labelled(TEXTS[:2])) == 2
