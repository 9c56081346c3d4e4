"""Every family but BERT: bert4keras's tables, original checkpoints, analysis.

ALBERT, NEZHA, RoFormer, ELECTRA (and RoBERTa); RoFormer-v2, GPT, GPT-2,
GPT2-ML, T5.1.0, T5.1.1 and mT5.
"""

import json

import numpy as np
import pytest

import keras
from conftest import CONFIGS, SHARED, golden, shared_path
from keras_graph import layer_table
from kbert import build_transformer_model
from kbert.errors import CheckpointError, ConfigError
from kbert.models.registry import FAMILIES, get_family, resolve
from kbert.analysis.params import analyze, explain_claim
from kbert.analysis.summary import crosscheck

FAMILY_GOLDEN = SHARED / "golden" / "bert4keras" / "families"

# golden case -> (bundled config or fixture, model, builder flags).
CASES = {
    "bert_base_zh_unilm": ("bert_base_chinese", "bert", {"application": "unilm", "with_mlm": True}),
    "bert_lm_tiny_ckpt": ("bert_lm_tiny", "bert", {"application": "lm", "with_mlm": True}),
    "bert_unilm_tiny_ckpt": ("bert_unilm_tiny", "bert", {"application": "unilm", "with_mlm": True}),
    "albert_unilm_tiny_ckpt": ("albert_unilm_tiny", "albert", {"application": "unilm", "with_mlm": True}),
    "albert_base_zh": ("albert_base_zh", "albert", {}),
    "albert_base_zh_mlm_nsp": ("albert_base_zh", "albert", {"with_mlm": True, "with_nsp": True}),
    "albert_tiny_zh": ("albert_tiny_zh", "albert", {}),
    "nezha_base_zh": ("nezha_base_zh", "nezha", {}),
    "roformer_base_zh": ("roformer_base_zh", "roformer", {}),
    "electra_small_zh": ("electra_small_zh", "electra", {}),
    "albert_tiny_ckpt": ("albert_tiny", "albert", {"with_mlm": True, "with_nsp": True}),
    "albert_unshared_tiny_ckpt": ("albert_unshared_tiny", "albert_unshared", {"with_mlm": True}),
    "nezha_tiny_ckpt": ("nezha_tiny", "nezha", {"with_mlm": True, "with_nsp": True}),
    "roformer_tiny_ckpt": ("roformer_tiny", "roformer", {"with_mlm": True}),
    "electra_tiny_ckpt": ("electra_tiny", "electra", {"with_discriminator": True}),
    "roformer_v2_base_zh": ("roformer_v2_base_zh", "roformer_v2", {}),
    "gpt2_chinese_cluecorpussmall": ("gpt2_chinese_base", "gpt2", {}),
    "t5_pegasus_base_zh": ("t5_pegasus_base_zh", "t5.1.1", {}),
    "mt5_small": ("mt5_small", "mt5.1.1", {}),
    "t5_11_encoder_tiny": ("t5_11_tiny", "t5.1.1_encoder", {}),
    "roformer_v2_tiny_ckpt": ("roformer_v2_tiny", "roformer_v2", {}),
    "gpt_tiny_ckpt": ("gpt_tiny", "gpt", {}),
    "gpt2_tiny_ckpt": ("gpt2_tiny", "gpt2", {}),
    "gpt2_ml_tiny_ckpt": ("gpt2_ml_tiny", "gpt2_ml", {}),
    "t5_tiny_ckpt": ("t5_tiny", "t5.1.0", {}),
    "t5_11_tiny_ckpt": ("t5_11_tiny", "t5.1.1", {}),
}
CHECKPOINT_CASES = sorted(case for case in CASES if case.endswith("_ckpt"))


def fixture_dir(case):
    return shared_path("fixtures", "bert4keras_families", CASES[case][0])


def config_of(case):
    bundled = CONFIGS / f"{CASES[case][0]}.json"
    return bundled if bundled.exists() else fixture_dir(case) / "config.json"


def family_golden(case):
    return golden(f"families/{case}.json")


def build(case, checkpoint=False):
    _, model, flags = CASES[case]
    return build_transformer_model(config_of(case), fixture_dir(case) if checkpoint else None, model=model, **flags)


def run(model, record):
    """The model on the recorded inputs: token ids, then segment ids or (T5) the decoder's token ids."""
    by_input = {"Input-Token": record["inputs"]["token_ids"], "Input-Segment": record["inputs"]["segment_ids"],
                "Encoder-Input-Token": record["inputs"]["token_ids"],
                "Decoder-Input-Token": record.get("decoder_token_ids")}
    inputs = [np.array(by_input[tensor.name]) for tensor in model.inputs]
    outputs = model.predict(inputs, verbose=0)
    return outputs if isinstance(outputs, list) else [outputs]


@pytest.mark.parametrize("case", sorted(CASES))
def test_names_order_params_wiring_totals_and_analytic_table_match_bert4keras(case):
    """The built model is bert4keras's, layer for layer; the analytic table (built once, the base sizes take
    seconds) gives the recorded total and agrees with it row by row."""
    record = family_golden(case)
    built = build(case)
    expected = [(layer["name"], layer["params"], layer["inbound"]) for layer in record["layers"]]
    assert layer_table(built) == expected
    assert built.count_params() == record["total_params"]
    _, model, flags = CASES[case]
    heads = {flag: value for flag, value in flags.items() if flag.startswith("with_")}
    analysis = analyze(resolve(config_of(case), model)[1], model=model, **heads)
    assert analysis.total == record["total_params"]
    assert all(row.ok for row in crosscheck(analysis, built))


def test_published_totals():
    totals = {name: analyze(resolve(CONFIGS / f"{name}.json")[1]).total
              for name in ("albert_base_zh", "albert_tiny_zh", "nezha_base_zh", "roformer_base_zh",
                           "electra_small_zh")}
    assert totals == {"albert_base_zh": 9_957_376, "albert_tiny_zh": 3_982_864, "nezha_base_zh": 101_292_096,
                      "roformer_base_zh": 123_457_536, "electra_small_zh": 12_280_576}
    totals = {name: analyze(resolve(CONFIGS / f"{name}.json")[1]).total
              for name in ("roformer_v2_base_zh", "gpt2_chinese_base", "t5_pegasus_base_zh", "mt5_small")}
    assert totals == {"roformer_v2_base_zh": 94_152_192, "gpt2_chinese_base": 102_068_736,
                      "t5_pegasus_base_zh": 275_029_248, "mt5_small": 300_176_768}
    albert = resolve(CONFIGS / "albert_base_zh.json")[1]
    assert analyze(albert, with_mlm=True, with_nsp=True).total == 10_669_322


@pytest.mark.parametrize("case", CHECKPOINT_CASES)
def test_original_checkpoint_outputs_match_bert4keras(case):
    record = family_golden(case)
    model = build(case, checkpoint=True)
    for output, expected in zip(run(model, record), record["outputs"], strict=True):
        np.testing.assert_allclose(output, np.array(expected), atol=1e-5, rtol=0)


@pytest.mark.parametrize("case", CHECKPOINT_CASES)
def test_checkpoint_variables_are_the_family_table(case):
    """Every variable of the original checkpoint feeds the model, and the model needs no other."""
    from kbert.checkpoints.google import open_google_checkpoint
    from kbert.checkpoints.loader import load_into

    record = family_golden(case)
    report = load_into(build(case), open_google_checkpoint(fixture_dir(case)))
    assert sorted(set(report.loaded)) == sorted(record["checkpoint_variables"])
    assert report.unused == []


@pytest.mark.parametrize("case", sorted(set(CHECKPOINT_CASES) - {"albert_unshared_tiny_ckpt"}))
def test_save_load_round_trip_is_bit_identical(case, tmp_path):
    from kbert.checkpoints.google import save_google_checkpoint

    original = build(case, checkpoint=True)
    prefix = save_google_checkpoint(original, tmp_path / "out" / "model.ckpt")
    reloaded = build_transformer_model(config_of(case), prefix, model=CASES[case][1], **CASES[case][2])
    for before, after in zip(original.weights, reloaded.weights, strict=True):
        assert before.path == after.path
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(before), keras.ops.convert_to_numpy(after))
    record = family_golden(case)
    for before, after in zip(run(original, record), run(reloaded, record), strict=True):
        np.testing.assert_array_equal(before, after)


def test_albert_unshared_cannot_be_saved_in_albert_layout(tmp_path):
    from kbert.checkpoints.google import save_google_checkpoint

    model = build("albert_unshared_tiny_ckpt", checkpoint=True)
    with pytest.raises(CheckpointError, match="albert_unshared.*one block"):
        save_google_checkpoint(model, tmp_path / "model.ckpt")
    assert not any(tmp_path.iterdir())


def test_albert_block_is_shared():
    model = build("albert_tiny_ckpt")
    attention = model.get_layer("Transformer-MultiHeadSelfAttention")
    assert len(attention._inbound_nodes) == 3  # called once per layer, one set of weights
    assert sum(layer.name.startswith("Transformer-") for layer in model.layers) == 8


def test_keras_file_round_trip_keeps_family_and_outputs(tmp_path):
    record = family_golden("nezha_tiny_ckpt")
    model = build("nezha_tiny_ckpt", checkpoint=True)
    path = tmp_path / "nezha.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert loaded.family == "nezha"
    for before, after in zip(run(model, record), run(loaded, record), strict=True):
        np.testing.assert_array_equal(before, after)


def test_wrong_family_checkpoint_names_the_missing_variables():
    """A BERT model cannot load an ALBERT checkpoint; the error lists what is missing and loads nothing."""
    config = fixture_dir("albert_tiny_ckpt") / "config.json"
    model = build_transformer_model(config, model="bert")
    before = [keras.ops.convert_to_numpy(weight).copy() for weight in model.weights]
    with pytest.raises(CheckpointError, match="nothing was loaded") as error:
        build_transformer_model(config, fixture_dir("albert_tiny_ckpt"), model="bert")
    assert "bert/encoder/layer_0/attention/self/query/kernel" in str(error.value)
    assert all(np.array_equal(a, keras.ops.convert_to_numpy(w)) for a, w in zip(before, model.weights))


def test_family_from_model_type_and_conflicts(tmp_path):
    values = json.loads((CONFIGS / "albert_tiny_zh.json").read_text())
    assert resolve(values)[0].name == "albert"
    assert resolve(values, "albert_unshared")[0].name == "albert_unshared"
    with pytest.raises(ConfigError, match="'model_type' is 'albert' but model='nezha'"):
        resolve(values, "nezha")
    with pytest.raises(ConfigError, match="key 'model_type': kbert builds .*got 'xlnet'"):
        resolve({**values, "model_type": "xlnet"})
    with pytest.raises(ConfigError, match="model='xlnet': kbert builds bert, roberta, albert"):
        build_transformer_model(CONFIGS / "bert_tiny.json", model="xlnet")


@pytest.mark.parametrize("model, flag", [("electra", "with_mlm"), ("electra", "with_pool"),
                                         ("bert", "with_discriminator")])
def test_heads_a_family_does_not_have_are_errors(model, flag):
    config = CONFIGS / ("electra_small_zh.json" if model == "electra" else "bert_tiny.json")
    with pytest.raises(ConfigError, match=f"model='{model}' has no {flag} head"):
        build_transformer_model(config, model=model, **{flag: True})


def test_registry_lists_every_family():
    assert list(FAMILIES) == ["bert", "roberta", "albert", "albert_unshared", "nezha", "roformer", "electra",
                              "roformer_v2", "gpt", "gpt2", "gpt2_ml", "t5", "t5.1.0", "t5_encoder",
                              "t5.1.0_encoder", "t5_decoder", "t5.1.0_decoder", "t5.1.1", "t5.1.1_encoder",
                              "t5.1.1_decoder", "mt5.1.1", "mt5.1.1_encoder", "mt5.1.1_decoder", "hf_roberta",
                              "distilbert", "mpnet", "modernbert", "deberta_v2",
                              "jina_embeddings_v3", "gte", "nomic_bert", "eurobert",
                              "llama", "mistral", "qwen2", "qwen3", "gemma3_text"]
    assert get_family("roberta").layer_weights("Embedding-Token") == get_family("bert").layer_weights("Embedding-Token")


def test_shared_block_counted_l_times_is_explained():
    analysis = analyze(resolve(CONFIGS / "albert_base_zh.json")[1])
    block = sum(row.params for row in analysis.layers if row.name.startswith("Transformer-"))
    explanations = explain_claim(analysis, analysis.total + 11 * block)
    assert [m.description for m in explanations[0]] == ["the shared block counted once per layer (L times)"]


def test_keep_tokens_selects_albert_vocabulary_rows():
    import tensorflow as tf

    keep = [0, 5, 7, 63, 2]
    directory = fixture_dir("albert_tiny_ckpt")
    model = build_transformer_model(directory / "config.json", directory, model="albert", with_mlm=True,
                                    keep_tokens=keep)
    reader = tf.train.load_checkpoint(str(directory / "model.ckpt"))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model.get_layer("Embedding-Token").embeddings),
                                  reader.get_tensor("bert/embeddings/word_embeddings")[keep])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model.get_layer("MLM-Bias").bias),
                                  reader.get_tensor("cls/predictions/output_bias")[keep])


def test_application_masks_follow_the_unilm_rule():
    """Source tokens see the source; target tokens see the source and the target up to themselves."""
    case = "bert_unilm_tiny_ckpt"
    model = build(case, checkpoint=True)
    tokens = np.array([[5, 6, 7, 8, 9, 10]])
    segments = np.array([[0, 0, 0, 1, 1, 1]])
    full = model.predict([tokens, segments], verbose=0)
    for cut in (3, 4, 5):  # a prefix gives the same outputs: nothing looks ahead
        prefix = model.predict([tokens[:, :cut], segments[:, :cut]], verbose=0)
        np.testing.assert_allclose(prefix[0], full[0, :cut], atol=1e-6)
    changed = model.predict([np.array([[5, 6, 7, 8, 9, 11]]), segments], verbose=0)
    np.testing.assert_array_equal(changed[0, :5], full[0, :5])


@pytest.mark.parametrize("kwargs, message", [
    ({"model": "electra", "application": "lm"}, "application='lm': model='electra' builds 'encoder'"),
    ({"application": "unilm", "segment_vocab_size": 0}, "application='unilm' reads the segment ids"),
    ({"application": "seq2seq"}, "application='seq2seq': model='bert' builds 'encoder', 'lm', 'unilm'"),
])
def test_bad_applications_are_errors(kwargs, message):
    config = CONFIGS / ("electra_small_zh.json" if kwargs.get("model") == "electra" else "bert_tiny.json")
    with pytest.raises(ConfigError, match=message):
        build_transformer_model(config, **kwargs)


@pytest.mark.parametrize("case, model, reason", [
    ("gpt2_ml_tiny_ckpt", "gpt2_ml", "Hugging Face's transformers has no GPT2-ML class"),
    ("roformer_v2_tiny_ckpt", "roformer_v2", "Hugging Face's transformers has no RoFormer-v2 class"),
])
def test_hugging_face_layout_is_refused_for_families_without_one(tmp_path, case, model, reason):
    from kbert.checkpoints.hf import load_hf_weights, save_hf_weights

    bert_file = save_hf_weights(build_transformer_model(CONFIGS / "bert_tiny.json"), tmp_path)
    built = build(case)
    with pytest.raises(CheckpointError, match=f"{reason}.*for model='{model}' use its original TF checkpoint. "
                                              "Nothing was loaded"):
        load_hf_weights(built, bert_file)
    with pytest.raises(CheckpointError, match="Nothing was written"):
        save_hf_weights(built, tmp_path / model)
    assert not (tmp_path / model).exists()
