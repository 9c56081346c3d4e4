import json

import pytest

from conftest import CONFIGS
from kbert.models.config import BertConfig
from kbert.errors import ConfigError

BASE = json.loads((CONFIGS / "bert_base_chinese.json").read_text())


def write(tmp_path, values, name="bert_config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(values))
    return path


def test_google_config_ignores_unused_keys():
    config = BertConfig.from_json_file(CONFIGS / "bert_base_chinese.json")
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (21128, 768, 12)
    assert config.head_size == 64
    assert config.activation == "gelu"
    assert "directionality" not in config.to_dict()


def test_hugging_face_config(tmp_path):
    values = {k: v for k, v in BASE.items() if not k.startswith(("pooler", "directionality"))}
    values.update(model_type="bert", layer_norm_eps=1e-7, hidden_act="gelu_new",
                  architectures=["BertModel"])
    config = BertConfig.from_json_file(write(tmp_path, values, "config.json"))
    assert config.layer_norm_eps == 1e-7
    assert config.activation == "gelu_tanh"


def test_round_trip(tmp_path):
    config = BertConfig.from_json_file(CONFIGS / "bert_tiny.json")
    config.to_json_file(tmp_path / "out.json")
    assert BertConfig.from_json_file(tmp_path / "out.json") == config


@pytest.mark.parametrize("change, message", [
    ({"hidden_size": None}, "missing required key(s) 'hidden_size'"),
    ({"num_hidden_layers": 0}, "key 'num_hidden_layers': expected a positive integer, got 0"),
    ({"vocab_size": "21128"}, "key 'vocab_size': expected a positive integer, got '21128'"),
    ({"num_attention_heads": 7}, "key 'num_attention_heads': 7 does not divide hidden_size 768"),
    ({"hidden_act": "mish"}, "key 'hidden_act': unsupported activation 'mish'; expected one of "
     "gelu, gelu_new, gelu_python, gelu_pytorch_tanh, gelu_tanh, relu, silu, swish, tanh"),
    ({"hidden_dropout_prob": 1.0}, "key 'hidden_dropout_prob': expected a number in [0, 1), got 1.0"),
    ({"embedding_size": 0}, "key 'embedding_size': expected a positive integer, got 0"),
])
def test_bad_values_name_file_and_key(tmp_path, change, message):
    values = dict(BASE)
    for key, value in change.items():
        if value is None:
            del values[key]
        else:
            values[key] = value
    path = write(tmp_path, values)
    with pytest.raises(ConfigError) as error:
        BertConfig.from_json_file(path)
    assert str(error.value) == f"{path}: {message}"


def test_not_json(tmp_path):
    path = tmp_path / "bert_config.json"
    path.write_text("{'hidden_size': 768")
    with pytest.raises(ConfigError, match="bert_config.json: not valid JSON"):
        BertConfig.from_json_file(path)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="nope.json: config file not found"):
        BertConfig.from_json_file(tmp_path / "nope.json")


@pytest.mark.parametrize("key, value, message", [
    ("hidden_act", ["gelu"], "key 'hidden_act': unsupported activation ['gelu']"),
    ("layer_norm_eps", float("inf"), "key 'layer_norm_eps': expected a finite positive number, got inf"),
    ("initializer_range", float("nan"), "key 'initializer_range': expected a finite positive number, got nan"),
])
def test_values_that_used_to_pass_or_crash(key, value, message):
    values = json.loads((CONFIGS / "bert_tiny.json").read_text())
    with pytest.raises(ConfigError) as error:
        BertConfig.from_dict({**values, key: value}, source="bert_config.json")
    assert str(error.value).startswith(f"bert_config.json: {message}")


def test_a_model_too_large_for_memory_fails_before_building():
    from kbert import build_transformer_model
    values = json.loads((CONFIGS / "bert_tiny.json").read_text())
    with pytest.raises(ConfigError, match=r"the model's weights need 119\.2 GB, more than this machine's .* GB "
                                          r"of memory; the largest layer, Embedding-Token, holds V·H = "
                                          r"1000000000·32 values \(119\.2 GB\): check vocab_size and hidden_size"):
        build_transformer_model({**values, "vocab_size": 10**9})
