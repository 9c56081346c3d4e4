"""Sentence-transformers' module types (`kbert.embeddings.modules`): each reads what it writes, adds its layer,
and a folder's modules make a pipeline in their order. Parity with sentence-transformers itself is in
test_embeddings.py, test_sparse_encoders.py and test_multi_vector_encoders.py."""

import json

import numpy as np
import pytest

from kbert.embeddings import modules as st_modules
from kbert.embeddings.folders import read_sentence_transformer, write_pipeline
from kbert.embeddings.kinds import DenseOutput
from kbert.errors import CheckpointError

RNG = np.random.default_rng(0)
WEIGHTS = [RNG.normal(size=(6, 4)).astype(np.float32), RNG.normal(size=4).astype(np.float32)]

MODULES = {
    "transformer": st_modules.Transformer("", {"max_seq_length": 12, "do_lower_case": True}),
    "mlm-transformer": st_modules.MLMTransformer("", {"max_seq_length": 12, "do_lower_case": False}),
    "pooling": st_modules.Pooling("mean", True, 6),
    "pooling-in-its-own-order": st_modules.Pooling("weightedmean+cls", False, 6),
    "splade-pooling": st_modules.SpladePooling("sum", "log1p_relu", 30),
    "dense": st_modules.Dense(WEIGHTS, "tanh"),
    "dense-of-each-token": st_modules.Dense(WEIGHTS[:1], None, st_modules.TOKENS),
    "normalize": st_modules.Normalize(),
    "normalize-each-token": st_modules.Normalize(st_modules.TOKENS),
    "multi-vector-mask": st_modules.MultiVectorMask(("!", ","), ("query", "document")),
    "causal-lm-transformer": st_modules.Transformer("", {"transformer_task": "text-generation"}, causal_lm=True),
    "logit-score": st_modules.LogitScore(9, 4),
    "logit-score-of-one-token": st_modules.LogitScore(9),
}


def same(module, read):
    if isinstance(module, st_modules.Dense):  # its weights are arrays: compared one by one
        return (read.activation, read.input_name, len(read.weights)) == \
            (module.activation, module.input_name, len(module.weights)) and \
            all(np.array_equal(a, b) for a, b in zip(read.weights, module.weights))
    return read == module


@pytest.mark.parametrize("name", MODULES)
def test_each_module_type_reads_what_it_writes(name, tmp_path):
    module = MODULES[name]
    module.write(str(tmp_path))
    read = type(module).read(str(tmp_path))
    if isinstance(module, st_modules.Transformer):  # read from where it is
        assert read.path == str(tmp_path)
        assert (read.settings, read.mlm, read.causal_lm) == (module.settings, module.mlm, module.causal_lm)
    else:
        assert same(module, read), read


def test_a_router_reads_what_it_writes(tmp_path):
    weights = RNG.random(30).astype(np.float32)
    router = st_modules.Router(st_modules.SparseStaticEmbedding("", True, weights),
                               [MODULES["mlm-transformer"], MODULES["splade-pooling"]], "query")
    router.write(str(tmp_path))
    read = st_modules.Router.read(str(tmp_path))
    assert (read.default_route, read.query.frozen) == ("query", True)
    assert [type(module) for module in read.document] == [st_modules.MLMTransformer, st_modules.SpladePooling]
    assert read.document[1] == router.document[1]
    np.testing.assert_array_equal(read.query.static_weights(30), weights)
    with pytest.raises(CheckpointError, match=r"model.safetensors: weight: expected floats of shape \[31\]"):
        read.query.static_weights(31)


def test_each_type_is_found_by_its_last_name_and_an_unknown_one_is_refused(tmp_path):
    MODULES["pooling"].write(str(tmp_path / "1_Pooling"))
    for spelled in ("sentence_transformers.models.Pooling", "sentence_transformers.models.pooling.Pooling.Pooling"):
        assert st_modules.read_module(spelled, "1", str(tmp_path), "1_Pooling", "modules.json") == MODULES["pooling"]
    with pytest.raises(CheckpointError, match=r"modules.json: module '1' of type 'sentence_transformers.models."
                                              r"WeightedLayerPooling' is not one kbert reads \(Transformer, "):
        st_modules.read_module("sentence_transformers.models.WeightedLayerPooling", "1", str(tmp_path), "1_Pooling",
                               "modules.json")
    assert set(st_modules.MODULE_TYPES) == {"Transformer", "MLMTransformer", "Pooling", "Dense", "Normalize",
                                            "SpladePooling", "MultiVectorMask", "Router", "LogitScore"}


def test_modules_add_their_layers_in_order():
    """Normalize, then a Tanh projection: each module's layer in turn, as NumPy computes them."""
    import keras

    vectors = RNG.normal(size=(3, 6)).astype(np.float32)
    inputs = keras.Input((6,))
    outputs = st_modules.Dense(WEIGHTS, "tanh").apply(st_modules.Normalize().apply(inputs, "n"), "d")
    unit = vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)
    np.testing.assert_allclose(keras.Model(inputs, outputs).predict(vectors, verbose=0),
                               np.tanh(unit @ WEIGHTS[0] + WEIGHTS[1]), atol=1e-6)
    with pytest.raises(CheckpointError, match="in_features 6, but the vectors before it have 4 values"):
        st_modules.Dense(WEIGHTS).apply(keras.Input((4,)), "d")


def test_a_folder_is_read_as_its_pipeline_in_order(tmp_path):
    modules = [MODULES["transformer"], MODULES["pooling"], MODULES["normalize"], MODULES["dense"]]
    write_pipeline(str(tmp_path), modules, DenseOutput("mean"), {"query": "query: "}, "query")
    spec = read_sentence_transformer(tmp_path)
    assert (spec.transformer, str(spec.output), spec.max_seq_length, spec.do_lower_case) == (str(tmp_path), "mean", 12,
                                                                                       True)
    assert [type(module) for module in spec.modules] == [st_modules.Pooling, st_modules.Normalize, st_modules.Dense]
    assert (spec.prompts, spec.default_prompt_name, spec.normalize) == ({"query": "query: "}, "query", True)
    assert json.loads((tmp_path / "modules.json").read_text())[3] == {
        "idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"}


@pytest.mark.parametrize("modules, message", [
    (["transformer", "dense", "pooling"], "a Dense before the Pooling reads the pooled vector that is not there yet"),
    (["transformer", "pooling", "pooling"], "expected one Pooling, SpladePooling or MultiVectorMask module after the "
                                            "Transformer, found 2"),
    (["pooling", "transformer"], r"expected one Transformer \(or MLMTransformer\), first"),
    (["transformer", "pooling", "normalize-each-token"], "a Normalize reads the token_embeddings; kbert computes it "
                                                         "on the sentence_embedding here"),
    (["mlm-transformer", "splade-pooling", "normalize"], "a module after a SpladePooling is not one kbert computes"),
    (["mlm-transformer", "pooling"], "an MLMTransformer gives vocabulary logits: expected a SpladePooling after it"),
    # before: a Keras error of a layer name used twice
    (["transformer", "pooling", "normalize", "normalize"], "Normalize more than once; kbert computes one"),
])
def test_a_pipeline_kbert_does_not_compute_is_refused_naming_the_file(modules, message, tmp_path):
    write_pipeline(str(tmp_path), [MODULES[name] for name in modules], DenseOutput("mean"))
    with pytest.raises(CheckpointError, match=f"modules.json: {message}"):
        read_sentence_transformer(tmp_path)


@pytest.mark.parametrize("file, change, message", [
    ("config_sentence_transformers.json", lambda c: {**c, "prompts": {"query": "q: "}, "default_prompt_name": ["query"]},
     r"default_prompt_name \['query'\]: expected the name of one of its prompts \(a string\) or null"),
    ("1_Pooling/config.json", lambda c: {"pooling_mode": {"mean": True}},
     r"1_Pooling/config.json: pooling_mode \{'mean': True\}: expected a mode's name or a list of them"),
])
def test_settings_of_the_wrong_type_are_named_not_tracebacks(tmp_path, file, change, message):
    """Before the fix: a list as default_prompt_name, an object as pooling_mode were TypeErrors (unhashable)."""
    write_pipeline(str(tmp_path), [MODULES["transformer"], MODULES["pooling"]], DenseOutput("mean"))
    path = tmp_path / file
    path.write_text(json.dumps(change(json.loads(path.read_text()) if path.exists() else {})))
    with pytest.raises(CheckpointError, match=message):
        read_sentence_transformer(tmp_path)

