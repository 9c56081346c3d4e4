"""Config keys transformers honours, read as transformers reads them or refused by name (round 6): the older
`rope_scaling` key, `rope_parameters` of each rope_type, rotary bases that are not numbers, a family's own key beside
BERT's name for it, EuroBERT's older `clf_pooling`.

Each computed case is compared in the parity venv with transformers on the same random weights, the config.json
holding the key as the hub's files hold it (transformers' own save would rewrite it as `rope_parameters`).
"""

import json

import numpy as np
import pytest

from kbert import ConfigError, build_transformer_model
from kbert.models.registry import resolve
from test_distilbert_mpnet import LAYOUTS as DISTILBERT_LAYOUTS
from test_eurobert import CONFIG as EUROBERT
from test_eurobert import LAYOUTS as EUROBERT_LAYOUTS
from test_modernbert import CONFIG as MODERNBERT
from test_rotary_encoders import CONFIGS as ROTARY
from test_rotary_encoders import LAYOUTS as ROTARY_LAYOUTS

GTE = ROTARY["gte"]


@pytest.mark.parametrize("config, message", [
    ({**GTE, "rope_scaling": {"type": "yarn", "factor": 2.0}}, "key 'rope_scaling': rope_type 'yarn' scales"),
    ({**GTE, "rope_scaling": 2.0}, "key 'rope_scaling': expected an object"),
    ({**EUROBERT, "rope_scaling": {"type": "yarn", "factor": 2.0}},
     "key 'rope_scaling': rope_type 'yarn' scales the rotary positions; kbert builds rope_type 'default' or "
     "'linear' here"),
    ({**EUROBERT, "rope_parameters": {"rope_type": "linear", "rope_theta": 500.0, "factor": -2}},
     "key 'rope_parameters': factor -2: expected a positive number"),
    ({**EUROBERT, "rope_theta": "10000"}, r"key 'rope_theta': expected a number > 1 \(the rotary base\), got '10000'"),
    ({**EUROBERT, "rope_theta": 0}, "key 'rope_theta': expected a number > 1"),
    ({**EUROBERT, "clf_pooling": "bos"}, "key 'clf_pooling' is 'bos': EuroBERT's older name for classifier_pooling, "
                                         r"which transformers does not read \(it pools 'late'\)"),
    ({**MODERNBERT, "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 2.0},
                                        "sliding_attention": {"rope_type": "default"}}},
     "key 'rope_parameters': rope_type 'linear' scales the rotary positions of the full_attention layers"),
    ({**MODERNBERT, "rope_parameters": {"full_attention": {"rope_type": "default"},
                                        "sliding_attention": {"rope_type": "yarn", "factor": 4.0}}},
     "rope_type 'yarn' scales the rotary positions of the sliding_attention layers"),
    ({**MODERNBERT, "rope_scaling": {"type": "linear", "factor": 2.0}}, "key 'rope_scaling': rope_type 'linear'"),
    ({**MODERNBERT, "global_rope_theta": -5.0}, "key 'global_rope_theta': expected a number > 1"),
    ({**MODERNBERT, "local_rope_theta": "1e4"}, "key 'local_rope_theta': expected a number > 1"),
    ({**GTE, "model_type": ["gte"]}, r"key 'model_type': expected a name \(a string such as 'bert'\), got \['gte'\]"),
])
def test_keys_kbert_does_not_compute_are_refused_by_name(config, message):
    with pytest.raises(ConfigError, match=message):
        resolve(config)


def test_a_familys_own_key_wins_over_berts_name_for_it_whatever_their_order():
    """DistilBERT's `activation` is what transformers reads; a `hidden_act` beside it (before or after) is not."""
    config = DISTILBERT_LAYOUTS["distilbert"][0]
    for both in ({**config, "activation": "relu", "hidden_act": "gelu"},
                 {"hidden_act": "gelu", **config, "activation": "relu"}):
        assert resolve(both)[1].hidden_act == "relu"


def test_modernberts_older_and_newer_rotary_keys_give_each_kind_its_base():
    thetas = {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 5e4},
                                  "sliding_attention": {"rope_type": "default", "rope_theta": 2e3}}}
    config = resolve({**MODERNBERT, **thetas})[1]
    assert (config.global_rope_theta, config.local_rope_theta) == (5e4, 2e3)
    config = resolve({**MODERNBERT, "rope_scaling": {"rope_type": "default", "rope_theta": 3e3}})[1]
    assert (config.global_rope_theta, config.local_rope_theta) == (3e3, 3e3)


#: (layout, the keys its config.json holds in place of transformers' save of them)
LEGACY = {
    # gte's rope_scaling, transformers' older key: linear scaling of a θ given beside it
    "gte_rope_scaling": (ROTARY_LAYOUTS["gte"], {"rope_theta": 20000.0,
                                                 "rope_scaling": {"type": "linear", "factor": 1.7}}),
    "eurobert_rope_scaling": (EUROBERT_LAYOUTS["eurobert"], {"rope_scaling": {"rope_type": "default",
                                                                              "rope_theta": 321.0}}),
    # linear scaling, in the older key and in transformers 5's (its save is then the file as it is)
    "eurobert_linear_rope_scaling": (EUROBERT_LAYOUTS["eurobert"], {"rope_theta": 321.0, "rope_scaling": {
        "type": "linear", "factor": 2.5}}),
    "eurobert_linear_rope_parameters": (EUROBERT_LAYOUTS["eurobert"], {"rope_parameters": {
        "rope_type": "linear", "rope_theta": 321.0, "factor": 2.5}}),
    "distilbert_both_activations": (DISTILBERT_LAYOUTS["distilbert"], {"activation": "relu", "hidden_act": "gelu"}),
}


@pytest.mark.parity
@pytest.mark.parametrize("case", sorted(LEGACY))
def test_older_keys_give_transformers_outputs(case, tmp_path):
    torch = pytest.importorskip("torch", reason="the parity extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the parity extra is not installed")
    (config, flags, _, architecture), keys = LEGACY[case]
    written = {**config, **keys}
    torch.manual_seed(0)
    reference = getattr(transformers, architecture)(transformers.AutoConfig.for_model(**written)).eval()
    reference.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved = {key: value for key, value in saved.items() if key not in ("rope_parameters", "rope_scaling")}
    (tmp_path / "config.json").write_text(json.dumps({**saved, **keys}))
    tokens = np.random.default_rng(0).integers(4, config["vocab_size"], (2, 40))
    with torch.no_grad():
        expected = reference(input_ids=torch.tensor(tokens)).last_hidden_state.numpy()
    model = build_transformer_model(tmp_path / "config.json", tmp_path, **flags)
    np.testing.assert_allclose(model.predict_on_batch([tokens, np.zeros_like(tokens)]), expected, atol=1e-4)
