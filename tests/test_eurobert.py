"""EuroBERT (`model_type` eurobert): Llama's pre-norm blocks made bidirectional, with grouped-query attention. Its
Hugging Face layout both ways, its analytic table, and (in the parity venv) transformers' outputs on random models
that it builds (drawn with `initializer_range` 0.3, so that the rotary positions and the shared key/value heads move
the outputs well past the tolerance)."""

import pytest

from kbert import ConfigError, build_transformer_model
from kbert.analysis.params import analyze
from kbert.analysis.summary import crosscheck
from kbert.models.config import bundled_config_path
from kbert.models.registry import resolve
from test_hf_families import assert_transformers_parity, padded_rows, written_back

V, H, I = 60, 16, 24
# Four query heads sharing two key/value heads; special ids inside the small vocabulary.
CONFIG = {"model_type": "eurobert", "vocab_size": V, "hidden_size": H, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": I, "max_position_embeddings": 64,
          "initializer_range": 0.3, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "mask_token_id": 3}
BIASED = {**CONFIG, "num_key_value_heads": 1, "attention_bias": True, "mlp_bias": True}


def backbone(bias=False):
    kv = H // 2 if not bias else H // 4
    names = {"embed_tokens.weight": (V, H), "norm.weight": (H,)}
    for index in range(2):
        scope = f"layers.{index}"
        for name, rows, columns in (("self_attn.q_proj", H, H), ("self_attn.k_proj", kv, H),
                                    ("self_attn.v_proj", kv, H), ("self_attn.o_proj", H, H), ("mlp.gate_proj", I, H),
                                    ("mlp.up_proj", I, H), ("mlp.down_proj", H, I)):
            names[f"{scope}.{name}.weight"] = (rows, columns)
            if bias:
                names[f"{scope}.{name}.bias"] = (rows,)
        names.update({f"{scope}.input_layernorm.weight": (H,), f"{scope}.post_attention_layernorm.weight": (H,)})
    return names


def prefixed(names):
    return {f"model.{name}": shape for name, shape in names.items()}


LAYOUTS = {
    "eurobert": (CONFIG, {}, backbone(), "EuroBertModel"),
    "eurobert_mlm": (CONFIG, {"with_mlm": True}, {**prefixed(backbone()), "lm_head.weight": (V, H)},
                     "EuroBertForMaskedLM"),
    "eurobert_biased_mlm": (BIASED, {"with_mlm": True},
                            {**prefixed(backbone(bias=True)), "lm_head.weight": (V, H), "lm_head.bias": (V,)},
                            "EuroBertForMaskedLM"),
    "eurobert_tied_mlm": ({**CONFIG, "tie_word_embeddings": True}, {"with_mlm": True}, prefixed(backbone()),
                          "EuroBertForMaskedLM"),
}


@pytest.mark.parametrize("flags, total", [({}, 211_766_016), ({"with_mlm": True}, 310_266_624)])
def test_the_analytic_table_is_the_built_model_and_transformers_count(flags, total):
    """EuroBERT-210m's shape; the totals are what transformers counts for EuroBertModel / EuroBertForMaskedLM."""
    analysis = analyze(resolve(bundled_config_path("eurobert_210m"))[1], **flags)
    assert analysis.total == total
    if not flags:
        model = build_transformer_model(bundled_config_path("eurobert_210m"))
        assert all(row.ok for row in crosscheck(analysis, model)) and model.count_params() == total


@pytest.mark.parametrize("changed, message", [
    ({"num_key_value_heads": 3}, "key 'num_key_value_heads': expected a whole number that divides"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}, "rope_type 'yarn' scales the rotary positions"),
    ({"head_dim": 8}, "key 'head_dim': 8 is not hidden_size / num_attention_heads"),
])
def test_keys_kbert_cannot_build_are_named(changed, message):
    with pytest.raises(ConfigError, match=message):
        resolve({**CONFIG, **changed})


# A tied head with no bias has no tensor of its own: kbert writes that file as the bare model's, which transformers
# reads either way (the parity test below); the names are not the ones written by hand.
@pytest.mark.parametrize("layout", sorted(set(LAYOUTS) - {"eurobert_tied_mlm"}))
def test_layout_loads_and_is_written_back_byte_for_byte(tmp_path, layout):
    _, _, saved = written_back(tmp_path, layout, LAYOUTS)
    assert saved["rope_parameters"]["rope_type"] == "default" and saved["mask_token_id"] == 3
    assert saved["num_key_value_heads"] == LAYOUTS[layout][0]["num_key_value_heads"]


TOKENS, REAL = padded_rows(V, lowest=4, length=11, second_real=7)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parity
def test_same_outputs_as_transformers_both_ways_and_sharded(tmp_path, layout):
    assert_transformers_parity(tmp_path, LAYOUTS[layout], TOKENS, REAL)


# Every task trained, written and read back through the CLI: 33-50 s here, an example (CI runs it).
@pytest.mark.examples
@pytest.mark.parametrize("pad_token", [None, "[SEP]"], ids=["pad-token", "pad-token-ends-every-text"])
def test_each_task_trains_from_the_cli_and_reads_back(tmp_path, pad_token):
    """A random EuroBERT with its (untied) MLM head and a WordPiece tokenizer.json: pre-trained, fine-tuned to
    accuracy 1.0 and exported to ONNX (int8), an embedding model, a reranker written as
    EuroBertForSequenceClassification and a CRF tagger, each read back. With its pad token one that ends every
    text (EuroBERT's own <|end_of_text|> is both), every task pads with negative ids, hidden by length, and a
    trained model directory keeps the setting."""
    import json

    from kbert import save_hf_weights
    from kbert.tokenizers.tokenizer_json import TokenizerJson
    from test_distilbert_mpnet import assert_every_task, wordpiece_folder

    folder = wordpiece_folder(tmp_path / "hf", "distilbert")
    if pad_token:
        (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                                  "pad_token": pad_token}))
    tokenizer = TokenizerJson(folder / "tokenizer.json")
    assert (tokenizer.pad_token_id, tokenizer.pad_id) == ((3, -4) if pad_token else (0, -1))  # [SEP] is 3
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    config = {**CONFIG, "vocab_size": vocab, "initializer_range": 0.02, "max_position_embeddings": 128}
    save_hf_weights(build_transformer_model(config, with_mlm=True), folder)
    assert_every_task(folder, tmp_path, "eurobert", pad_token_id=tokenizer.pad_token_id, cross_encoder="EuroBert")


@pytest.mark.parametrize("pooling", ["late", "mean", "bos"])
@pytest.mark.parity
def test_a_eurobert_cross_encoder_scores_as_transformers_and_sentence_transformers(tmp_path, pooling):
    """EuroBertForSequenceClassification with one label: each classifier_pooling (late: every token's dense and
    GELU, then their logits' mean; mean; bos: the first token), then dense and GELU, then classifier."""
    import json

    torch = pytest.importorskip("torch", reason="the parity extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the parity extra is not installed")
    from test_distilbert_mpnet import SENTENCES, assert_cross_encoder_parity, wordpiece_folder

    folder = wordpiece_folder(tmp_path / pooling, "distilbert")
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(**{**CONFIG, "vocab_size": vocab, "num_labels": 1,
                                                  "classifier_pooling": pooling})
    transformers.EuroBertForSequenceClassification(config).eval().save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                              "pad_token": "[PAD]", "cls_token": "[CLS]",
                                                              "sep_token": "[SEP]", "unk_token": "[UNK]",
                                                              "model_input_names": ["input_ids", "attention_mask"]}))
    assert_cross_encoder_parity(folder, [SENTENCES[0]] * 3, SENTENCES[1:4], told_apart=True)
