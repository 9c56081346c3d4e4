import subprocess
import sys

import pytest

from conftest import CONFIGS, golden
from golden_cases import CASES, config_path
from kbert.models.config import BertConfig
from kbert.analysis.params import analyze, explain_claim, flops_per_token


def load(name):
    return BertConfig.from_json_file(CONFIGS / name)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_layer_matches_bert4keras(case):
    record = golden(case)
    _, flags, labels = CASES[case]
    analysis = analyze(BertConfig.from_json_file(config_path(case)), num_labels=labels, **flags)
    expected = {layer["name"]: layer["params"] for layer in record["layers"] if layer["params"]}
    assert {layer.name: layer.params for layer in analysis.layers} == expected
    assert analysis.total == record["total_params"]


def test_well_known_totals():
    assert analyze(load("bert_base_chinese.json"), num_labels=2).total == 101_678_594
    assert analyze(load("bert_large_chinese.json")).total == 324_472_832
    uncased = analyze(load("bert_base_uncased.json"), with_pool=True)
    assert uncased.total == 109_482_240
    assert uncased.group_totals() == {"embeddings": 23_837_184, "encoder": 85_054_464, "pooler": 590_592}
    shares = uncased.to_dict()["groups"]
    assert round(100 * shares["embeddings"]["share"], 1) == 21.8


def test_formula_is_written_out():
    analysis = analyze(load("bert_base_chinese.json"))
    attention = analysis.layers[4]
    assert attention.name == "Transformer-0-MultiHeadSelfAttention"
    assert f"{attention.formula} = {analysis.expand(attention.formula)} = {attention.params:,}" == \
        "4·(H·H + H) = 4·(768·768 + 768) = 2,362,368"


def test_circulating_hand_count_is_explained_exactly():
    analysis = analyze(load("bert_base_chinese.json"))
    [combo] = explain_claim(analysis, 75_641_856)
    assert sorted(m.description for m in combo) == [
        "attention biases left out",
        "attention weights counted for one block instead of L",
        "feed-forward biases left out",
    ]
    assert sorted(m.params for m in combo) == sorted([11 * 2_359_296, 12 * 4 * 768, 12 * (3072 + 768)])


def test_tied_mlm_weights_counted_twice():
    config = load("bert_base_chinese.json")
    analysis = analyze(config, with_nsp=True, with_mlm=True)
    [[mistake]] = explain_claim(analysis, 102_882_442 + 21128 * 768)
    assert mistake.description == "tied MLM output matrix counted a second time"


def test_right_claim_and_unexplainable_claim():
    analysis = analyze(load("bert_base_chinese.json"))
    assert explain_claim(analysis, analysis.total) == []
    assert explain_claim(analysis, analysis.total - 7) == []


def test_flops_per_token():
    config = load("bert_base_chinese.json")
    # 12 blocks of 2·(4·768² + 2·768·3072) + 4·128·768 FLOPs.
    assert flops_per_token(config, 128) == 12 * (2 * (4 * 768**2 + 2 * 768 * 3072) + 4 * 128 * 768)


def test_params_module_does_not_import_tensorflow():
    code = ("import sys, kbert.cli; kbert.cli.main(['params', '--claim', '75641856']); "
            "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "101,677,056" in result.stdout
