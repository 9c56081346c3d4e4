"""Sparse encoders (SPLADE): sentence-transformers' `SparseEncoder` folders (an `MLMTransformer` and a
`SpladePooling`) read, encoded, written back, embedded from the CLI and served on `/embed_sparse`.

Without torch: the `SpladePooling` layer against NumPy, and a sparse folder kbert writes (a small random BERT
with its masked-LM head, the real all-MiniLM-L6-v2's tokenizer) whose weights are checked against the masked-LM
logits of each text run alone, unpadded. In the parity venv: sentence-transformers 6's `SparseEncoder` on random
BERT and DistilBERT masked-LMs that transformers builds, both ways, in each pooling and activation.
"""

import json
import math

import keras
import numpy as np
import pytest

from conftest import evaluated_on_prefixes, kbert_in_process, mean_reciprocal_rank, minilm_dir, shared_path, write
from kbert import bundled_config_path

TEXTS = ["A man is eating food.", "The girl is carrying a baby on her back in the park.", "drums",
         "Someone in a gorilla costume is playing a set of drums while a crowd watches."]
POOLINGS = [("max", "relu"), ("sum", "relu"), ("max", "log1p_relu")]


def splade_numpy(logits, strategy="max", activation="relu"):
    """SPLADE's weights of one text's `[seq, V]` logits, as sentence-transformers' SpladePooling computes them."""
    weights = np.log1p(np.maximum(logits, 0.0))
    if activation == "log1p_relu":
        weights = np.log1p(weights)
    return weights.max(axis=0) if strategy == "max" else weights.sum(axis=0)


@pytest.mark.parametrize("strategy, activation", POOLINGS)
def test_splade_pooling_is_numpys_over_the_real_tokens(strategy, activation):
    from kbert.layers import SpladePooling

    logits = np.random.default_rng(0).normal(size=(2, 5, 7)).astype("float32") * 3
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    got = keras.ops.convert_to_numpy(SpladePooling(strategy, activation)(logits, mask=mask))
    expected = [splade_numpy(row[keep], strategy, activation) for row, keep in zip(logits, mask)]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_splade_pooling_layer_contract(tmp_path):
    """Shapes, masks (padding appended changes nothing), get_config round trip, .keras with safe_mode=True."""
    from kbert.layers import SpladePooling

    layer = SpladePooling("sum", "log1p_relu")
    tokens = keras.Input((None,), dtype="int32")
    logits = keras.layers.Embedding(50, 9, mask_zero=True, embeddings_initializer="random_normal")(tokens)
    model = keras.Model(tokens, layer(logits))
    ids = np.array([[5, 6, 7, 8, 0], [8, 9, 0, 0, 0]])
    output = model.predict(ids, verbose=0)
    assert output.shape == (2, 9) and (output >= 0).all() and (output > 0).any()
    np.testing.assert_allclose(model.predict(np.pad(ids, [(0, 0), (0, 4)]), verbose=0), output, atol=1e-6)
    assert SpladePooling.from_config(layer.get_config()).get_config() == layer.get_config()
    model.save(tmp_path / "model.keras")
    restored = keras.models.load_model(tmp_path / "model.keras", safe_mode=True)
    np.testing.assert_allclose(restored.predict(ids, verbose=0), output, atol=1e-6)
    with pytest.raises(ValueError, match="strategy 'mean'"):
        SpladePooling("mean")


def test_term_weights_layer_contract(tmp_path):
    """A weight table's vectors: each id once, the ignored and hidden (negative) ids none, the padding appended
    changes nothing; get_config round trip, .keras with safe_mode=True, the weights trained by a gradient."""
    from kbert.layers import TermWeights

    layer = TermWeights(12, ignored_ids=(0, 1))
    tokens = keras.Input((None,), dtype="int32")
    model = keras.Model(tokens, layer(tokens))
    weights = np.linspace(0.5, 6.0, 12).astype(np.float32)
    layer.set_weights([weights])
    ids = np.array([[1, 5, 7, 5, 0], [1, 9, -4, 0, 0]])
    output = model.predict(ids, verbose=0)
    expected = np.zeros((2, 12), np.float32)
    expected[0, [5, 7]], expected[1, 9] = weights[[5, 7]], weights[9]
    np.testing.assert_allclose(output, expected)
    np.testing.assert_allclose(model.predict(np.pad(ids, [(0, 0), (0, 4)]), verbose=0), output)
    assert TermWeights.from_config(layer.get_config()).get_config() == layer.get_config()
    model.save(tmp_path / "model.keras")
    restored = keras.models.load_model(tmp_path / "model.keras", safe_mode=True)
    np.testing.assert_allclose(restored.predict(ids, verbose=0), output)
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss="mse")
    model.fit(ids, np.zeros((2, 12)), epochs=1, verbose=0)
    moved = layer.get_weights()[0] != weights
    assert moved.tolist() == [index in (5, 7, 9) for index in range(12)]  # only the present terms learn


def test_sparse_terms_keeps_the_largest_in_ascending_ids():
    from kbert.embeddings.sparse import sparse_terms

    indices, values = sparse_terms(np.array([0.0, 0.3, 0.0, 0.9, 0.1, 0.5], np.float32), top_k=3)
    assert indices.tolist() == [1, 3, 5] and values.tolist() == pytest.approx([0.3, 0.9, 0.5])
    assert sparse_terms(np.zeros(4, np.float32))[0].size == 0


# --- a sparse folder kbert writes -----------------------------------------------------------------------------

def sparse_embedder(pooling=("max", "relu")):
    """A SPLADE embedder on a random 2-layer BERT with MiniLM's vocabulary and tokenizer."""
    from kbert import build_transformer_model
    from kbert.embeddings.sparse import SparseOutput
    from kbert.embeddings.embedder import Embedder
    from kbert.embeddings.kinds import embedding_model
    from kbert.tokenizers.tokenizer_json import folder_tokenizer

    keras.utils.set_random_seed(3)
    config = {"model_type": "bert", "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64,
              "initializer_range": 0.5}
    bert = build_transformer_model(config, with_mlm="linear")
    spec = SparseOutput(*pooling)
    return Embedder(embedding_model(bert, spec), folder_tokenizer(str(minilm_dir())), 64, False, "", bert, spec)


@pytest.fixture(scope="module")
def sparse_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sparse") / "splade"
    sparse_embedder().save(folder)
    return folder


def alone(embedder, text, pooling=("max", "relu")):
    """SPLADE's weights of `text` from its masked-LM logits, run alone (no padding to leave out)."""
    ids, segments = embedder.tokenizer.encode(text, maxlen=embedder.maxlen)
    logits = embedder.backbone.predict([np.array([ids]), np.array([segments])], verbose=0)[0]
    return splade_numpy(logits, *pooling)


def test_a_sparse_folder_reads_back_and_gives_each_texts_weights(sparse_folder):
    from kbert.embeddings.embedder import Embedder

    modules = json.loads((sparse_folder / "modules.json").read_text())
    assert [module["type"].rsplit(".", 1)[-1] for module in modules] == ["MLMTransformer", "SpladePooling"]
    assert json.loads((sparse_folder / "config_sentence_transformers.json").read_text())["model_type"] == \
        "SparseEncoder"
    embedder = Embedder.load(sparse_folder)
    assert embedder.output.name == "sparse" and embedder.dimensions == 30522
    terms = embedder.encode_sparse(TEXTS, batch_size=3)  # padded batches of unlike lengths
    for text, (indices, values) in zip(TEXTS, terms):
        expected = alone(embedder, text)
        assert indices.tolist() == np.flatnonzero(expected).tolist()
        np.testing.assert_allclose(values, expected[indices], rtol=1e-4, atol=5e-5)
    top = embedder.encode_sparse(TEXTS[:1], top_k=5)[0]
    assert top[0].tolist() == sorted(np.argsort(-alone(embedder, TEXTS[0]))[:5].tolist())


@pytest.mark.parametrize("strategy, activation", POOLINGS[1:])
def test_each_pooling_and_activation_is_written_and_read(strategy, activation, tmp_path):
    from kbert.embeddings.embedder import Embedder

    sparse_embedder((strategy, activation)).save(tmp_path / "splade")
    assert json.loads((tmp_path / "splade" / "1_SpladePooling" / "config.json").read_text()) == {
        "pooling_strategy": strategy, "activation_function": activation, "embedding_dimension": 30522}
    embedder = Embedder.load(tmp_path / "splade")
    indices, values = embedder.encode_sparse(TEXTS[1:2])[0]
    expected = alone(embedder, TEXTS[1], (strategy, activation))[indices]
    np.testing.assert_allclose(values, expected, rtol=1e-4, atol=1e-6)  # JAX's float32 rounds apart at 1e-8


def rewrite_modules(folder, change):
    modules = json.loads((folder / "modules.json").read_text())
    change(modules)
    (folder / "modules.json").write_text(json.dumps(modules))


@pytest.mark.parametrize("change, message", [
    (lambda modules: modules[0].update(type="sentence_transformers.models.Transformer"),
     "a SpladePooling pools a masked-LM's logits: expected an MLMTransformer before it"),
    (lambda modules: modules.append({"idx": 2, "name": "2", "path": "2_WordWeights",
                                     "type": "sentence_transformers.models.WordWeights"}),
     "module '2' of type 'sentence_transformers.models.WordWeights' is not one kbert reads"),
    (lambda modules: modules.append({"idx": 2, "name": "2", "path": "", "type": "sentence_transformers.models."
                                                                              "Normalize"}),
     "a module after a SpladePooling is not one kbert computes"),
], ids=["plain-transformer", "unknown-module", "normalize-after"])
def test_a_pipeline_kbert_does_not_compute_is_refused_by_name(sparse_folder, tmp_path, change, message):
    import shutil

    from kbert.errors import CheckpointError
    from kbert.embeddings.embedder import Embedder

    folder = tmp_path / "changed"
    shutil.copytree(sparse_folder, folder)
    rewrite_modules(folder, change)
    with pytest.raises(CheckpointError, match=message.replace("(", r"\(")):
        Embedder.load(folder)


def test_a_splade_config_of_unknown_options_is_named(sparse_folder, tmp_path):
    import shutil

    from kbert.errors import CheckpointError
    from kbert.embeddings.embedder import Embedder

    folder = tmp_path / "changed"
    shutil.copytree(sparse_folder, folder)
    (folder / "1_SpladePooling" / "config.json").write_text('{"pooling_strategy": "mean"}')
    with pytest.raises(CheckpointError, match=r"1_SpladePooling/config.json: pooling_strategy 'mean'"):
        Embedder.load(folder)


def test_kbert_embed_writes_indices_and_values_and_refuses_dense_options(sparse_folder, tmp_path):
    from kbert.embeddings.embedder import Embedder

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    run = kbert_in_process("embed", "--model", str(sparse_folder), str(texts), "--top-k", "20")
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    expected = Embedder.load(sparse_folder).encode_sparse(TEXTS, top_k=20)
    assert len(lines) == len(TEXTS)
    for line, (indices, values) in zip(lines, expected):
        assert line["indices"] == indices.tolist()
        np.testing.assert_allclose(line["values"], values, rtol=1e-5)
    refused = kbert_in_process("embed", "--model", str(sparse_folder), str(texts), "--npy", str(tmp_path / "x.npy"))
    assert refused.returncode != 0 and "is a sparse encoder (SpladePooling): --npy" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "x.npy").exists()
    dense = kbert_in_process("embed", "--model", str(minilm_dir()), str(texts), "--top-k", "3")
    assert dense.returncode != 0 and "--top-k: " in dense.stderr and "is not a sparse encoder" in dense.stderr


@pytest.mark.examples  # a whole run (tens of seconds): CI's example step runs it
def test_the_server_answers_embed_sparse_and_refuses_dense_routes(sparse_folder):
    pytest.importorskip("fastapi", reason="kbert serve needs FastAPI and uvicorn: pip install 'kbert[serve]'")
    from kbert.embeddings.embedder import Embedder
    from test_serve import post, running_server

    expected = Embedder.load(sparse_folder).encode_sparse(TEXTS)
    with running_server(sparse_folder, "--max-batch", "3") as (url, _):
        status, answer = post(url, {"inputs": TEXTS}, path="/embed_sparse")
        assert status == 200 and len(answer) == len(TEXTS)
        served = [([entry["index"] for entry in row], [entry["value"] for entry in row]) for row in answer]
        assert all(indices == sorted(indices) for indices, _ in served)
        # other batches than encode_sparse's: float32's rounding differs, so a weight near 0 may be in one only
        np.testing.assert_allclose(dense_rows(served, 30522), dense_rows(expected, 30522), atol=1e-5)
        status, answer = post(url, {"inputs": "word " * 100}, path="/embed_sparse")
        assert status == 413 and answer["error_type"] == "Validation"
        status, answer = post(url, {"inputs": "word " * 100, "truncate": True}, path="/embed_sparse")
        assert status == 200 and len(answer) == 1
        status, answer = post(url, {"inputs": ["a"]}, path="/embed")
        assert status == 400 and "POST /embed_sparse gives its vectors" in answer["error"]
        status, answer = post(url, {"input": ["a"]}, path="/v1/embeddings")
        assert status == 400 and "sparse encoder" in answer["error"]["message"]
        status, answer = post(url, {"texts": TEXTS[:2]})
        assert status == 200 and set(answer["predictions"][1]) == {"text", "indices", "values"}
    with running_server(minilm_dir()) as (url, _):
        status, answer = post(url, {"inputs": ["a"]}, path="/embed_sparse")
        assert status == 400 and "this model is a dense model" in answer["error"]


# --- inference-free sparse encoders: a Router, SPLADE for documents and a weight table for queries ---------------

def router_embedder():
    """`sparse_embedder`'s SPLADE for documents, and for queries a random weight table (a third of it 0)."""
    from kbert.embeddings.inference_free import StaticQuery

    embedder = sparse_embedder()
    weights = np.random.default_rng(5).random(30522).astype(np.float32) * 3
    weights[np.random.default_rng(6).random(30522) < 0.3] = 0
    embedder.static_query = StaticQuery(weights, embedder.tokenizer, None)
    embedder.prompts = {"query": "", "document": ""}
    return embedder


@pytest.fixture(scope="module")
def router_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("router") / "inference-free"
    router_embedder().save(folder)
    return folder


def table_terms(folder, text):
    """A query's terms as the Router's query route gives them: the weight of each distinct token id of the text
    (no [CLS] or [SEP]), read here with `tokenizers` and `safetensors` themselves."""
    import tokenizers
    from safetensors.numpy import load_file

    query = folder / "query_0_SparseStaticEmbedding"
    tokenizer = tokenizers.Tokenizer.from_file(str(query / "tokenizer.json"))
    tokenizer.no_padding()  # MiniLM's file pads to 128
    ids = np.unique(tokenizer.encode(text, add_special_tokens=False).ids)
    weights = load_file(str(query / "model.safetensors"))["weight"][ids]
    return ids[weights != 0].tolist(), weights[weights != 0]


def test_an_inference_free_folder_is_a_router_and_reads_queries_from_its_table(router_folder):
    from kbert.embeddings.embedder import Embedder

    assert [module["type"] for module in json.loads((router_folder / "modules.json").read_text())] == [
        "sentence_transformers.base.modules.router.Router"]
    router = json.loads((router_folder / "router_config.json").read_text())
    assert router["structure"] == {"query": ["query_0_SparseStaticEmbedding"],
                                   "document": ["document_0_MLMTransformer", "document_1_SpladePooling"]}
    assert router["parameters"]["default_route"] == "document"
    embedder = Embedder.load(router_folder)
    assert embedder.static_query is not None and embedder.output.name == "sparse"
    queries = ["what does a man eat?", "drums drums drums", "a baby"]
    for text, (indices, values) in zip(queries, embedder.encode_sparse(queries, role="query")):
        expected_ids, expected_values = table_terms(router_folder, text)
        assert indices.tolist() == expected_ids and 0 < len(expected_ids) < 6
        np.testing.assert_array_equal(values, expected_values)
    documents = embedder.encode_sparse(TEXTS, role="document")
    assert [ids.size for ids, _ in embedder.encode_sparse(TEXTS)] == [ids.size for ids, _ in documents]  # the default
    for text, (indices, values) in zip(TEXTS, documents):
        expected = alone(embedder, text)
        assert indices.tolist() == np.flatnonzero(expected).tolist()
        np.testing.assert_allclose(values, expected[indices], rtol=1e-4, atol=5e-5)


def test_kbert_embed_and_the_server_take_the_role_of_an_inference_free_encoder(router_folder, tmp_path):
    pytest.importorskip("fastapi", reason="kbert serve needs FastAPI and uvicorn: pip install 'kbert[serve]'")
    from kbert.embeddings.embedder import Embedder
    from test_serve import post, running_server

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    queries = kbert_in_process("embed", "--model", str(router_folder), str(texts), "--prompt-name", "query")
    documents = kbert_in_process("embed", "--model", str(router_folder), str(texts))
    assert queries.returncode == 0 and documents.returncode == 0, queries.stderr + documents.stderr
    lines = [json.loads(line) for line in queries.stdout.splitlines()]
    assert [line["indices"] for line in lines] == [table_terms(router_folder, text)[0] for text in TEXTS]
    embedder = Embedder.load(router_folder)
    expected = embedder.encode_sparse(TEXTS, role="document")
    assert [json.loads(line)["indices"] for line in documents.stdout.splitlines()] == \
        [ids.tolist() for ids, _ in expected]
    with running_server(router_folder, "--max-batch", "3") as (url, _):
        status, answer = post(url, {"inputs": TEXTS, "prompt_name": "query"}, path="/embed_sparse")
        assert status == 200
        assert [[entry["index"] for entry in row] for row in answer] == [line["indices"] for line in lines]
        status, answer = post(url, {"inputs": TEXTS[:2]}, path="/embed_sparse")
        assert status == 200 and [len(row) for row in answer] == [ids.size for ids, _ in expected[:2]]


def test_kbert_evaluate_embeds_an_inference_free_encoders_queries_by_its_table(router_folder, tmp_path, capsys):
    corpus = TEXTS + ["A woman is playing violin.", "Two men pushed carts through the woods."]
    result, queries = evaluated_on_prefixes(router_folder, tmp_path, capsys, corpus, 20)
    assert result["query_terms"] == pytest.approx(np.mean([len(table_terms(router_folder, q)[0]) for q in queries]))
    assert result["document_terms"] > 1000  # SPLADE's documents, from the model


@pytest.mark.parametrize("change, message", [
    (lambda router: router["structure"].update(image=["query_0_SparseStaticEmbedding"]),
     "a Router of the routes 'query', 'document', 'image'; kbert computes inference-free SPLADE"),
    (lambda router: router["parameters"].update(route_mappings={"('query', None)": "document"}),
     "without route_mappings"),
    (lambda router: router["structure"].update(query=["document_0_MLMTransformer"]),
     "a Router of the routes"),
    (lambda router: router["parameters"].update(default_route="image"), "default_route 'image'"),
    (lambda router: router["structure"].update(document=["../escape"]), "lies outside the model folder"),
], ids=["third-route", "mappings", "model-queries", "default-route", "escape"])
def test_a_router_kbert_does_not_compute_is_refused_by_name(router_folder, tmp_path, change, message):
    import shutil

    from kbert.errors import CheckpointError
    from kbert.embeddings.embedder import Embedder

    folder = tmp_path / "changed"
    shutil.copytree(router_folder, folder)
    router = json.loads((folder / "router_config.json").read_text())
    change(router)
    (folder / "router_config.json").write_text(json.dumps(router))
    with pytest.raises(CheckpointError, match=r"router_config.json: .*" + message.replace("(", r"\(")):
        Embedder.load(folder)


def test_a_weight_table_of_another_vocabulary_is_refused_naming_the_file(router_folder, tmp_path):
    import shutil

    from safetensors.numpy import save_file

    from kbert.errors import CheckpointError
    from kbert.embeddings.embedder import Embedder

    folder = tmp_path / "changed"
    shutil.copytree(router_folder, folder)
    save_file({"weight": np.ones(100, np.float32)}, str(folder / "query_0_SparseStaticEmbedding" / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"query_0_SparseStaticEmbedding/model.safetensors: weight: expected "
                                              r"floats of shape \[30522\] .* got float32 \[100\]"):
        Embedder.load(folder)


# --- the same, as sentence-transformers itself computes it (CI's parity venv) ------------------------------------

def random_masked_lm(torch, transformers, family):
    """A random masked-LM that transformers builds (BERT or DistilBERT), with MiniLM's vocabulary."""
    torch.manual_seed(0)
    if family == "bert":
        config = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=64, max_position_embeddings=64, initializer_range=0.5)
        return transformers.BertForMaskedLM(config)
    config = transformers.DistilBertConfig(vocab_size=30522, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                           max_position_embeddings=64, initializer_range=0.5)
    return transformers.DistilBertForMaskedLM(config)


def dense_rows(terms, width):
    rows = np.zeros((len(terms), width), np.float32)
    for row, (indices, values) in zip(rows, terms):
        row[indices] = values
    return rows


@pytest.mark.parity
@pytest.mark.parametrize("family", ["bert", "distilbert"])
@pytest.mark.parametrize("strategy, activation", POOLINGS)
def test_sentence_transformers_sparse_encoders_both_ways(family, strategy, activation, tmp_path):
    torch = pytest.importorskip("torch", reason="pip install '.[parity]' (with CPU torch) for the parity tests")
    transformers = pytest.importorskip("transformers", reason="pip install '.[parity]'")
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install '.[parity]'")
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    from kbert.embeddings.embedder import Embedder

    random_masked_lm(torch, transformers, family).save_pretrained(tmp_path / "mlm")
    transformers.AutoTokenizer.from_pretrained(str(minilm_dir())).save_pretrained(tmp_path / "mlm")
    theirs = sentence_transformers.SparseEncoder(modules=[MLMTransformer(str(tmp_path / "mlm")),
                                                          SpladePooling(strategy, activation)], device="cpu")
    theirs.save(str(tmp_path / "st"))
    expected = theirs.encode(TEXTS, convert_to_tensor=True).to_dense().numpy()
    assert ((expected > 0).sum(axis=1) > 100).all()  # the comparison covers many terms a text
    mine = Embedder.load(tmp_path / "st")  # logits of tens (initializer_range 0.5): float32 rounds at 1e-5
    np.testing.assert_allclose(dense_rows(mine.encode_sparse(TEXTS), 30522), expected, rtol=1e-4, atol=5e-5)
    mine.save(tmp_path / "back")
    read_back = sentence_transformers.SparseEncoder(str(tmp_path / "back"), device="cpu")
    np.testing.assert_allclose(read_back.encode(TEXTS, convert_to_tensor=True).to_dense().numpy(), expected,
                               rtol=1e-4, atol=5e-5)
    top = theirs.encode(TEXTS, convert_to_tensor=True, max_active_dims=16).to_dense().numpy()
    np.testing.assert_allclose(dense_rows(mine.encode_sparse(TEXTS, top_k=16), 30522), top, rtol=1e-4, atol=5e-5)


@pytest.mark.parity
def test_sentence_transformers_inference_free_routers_both_ways(tmp_path):
    """sentence-transformers' own inference-free SPLADE (`Router.for_query_document` with a `SparseStaticEmbedding`),
    and its version 6 spelling of a masked-LM (`Transformer` with `transformer_task` fill-mask)."""
    torch = pytest.importorskip("torch", reason="pip install '.[parity]' (with CPU torch) for the parity tests")
    transformers = pytest.importorskip("transformers", reason="pip install '.[parity]'")
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install '.[parity]'")
    from sentence_transformers.base.modules import Router, Transformer
    from sentence_transformers.sparse_encoder.modules import SparseStaticEmbedding, SpladePooling

    from kbert.embeddings.embedder import Embedder

    random_masked_lm(torch, transformers, "bert").save_pretrained(tmp_path / "mlm")
    transformers.AutoTokenizer.from_pretrained(str(minilm_dir())).save_pretrained(tmp_path / "mlm")
    document = Transformer(str(tmp_path / "mlm"), transformer_task="fill-mask")
    weight = torch.rand(30522, generator=torch.Generator().manual_seed(1)) * 3
    weight[weight < 0.9] = 0
    router = Router.for_query_document([SparseStaticEmbedding(document.tokenizer, weight)],
                                       [document, SpladePooling("max")])
    theirs = sentence_transformers.SparseEncoder(modules=[router], similarity_fn_name="dot", device="cpu")
    theirs.save(str(tmp_path / "st"))
    mine = Embedder.load(tmp_path / "st")
    mine.save(tmp_path / "back")
    read_back = sentence_transformers.SparseEncoder(str(tmp_path / "back"), device="cpu")
    for role, encode in (("query", "encode_query"), ("document", "encode_document"), (None, "encode")):
        expected = getattr(theirs, encode)(TEXTS, convert_to_tensor=True).to_dense().numpy()
        assert ((expected > 0).sum(axis=1) > (0 if role == "query" else 100)).all()
        np.testing.assert_allclose(dense_rows(mine.encode_sparse(TEXTS, role=role), 30522), expected,
                                   rtol=1e-4, atol=5e-5)
        np.testing.assert_allclose(getattr(read_back, encode)(TEXTS, convert_to_tensor=True).to_dense().numpy(),
                                   expected, rtol=1e-4, atol=5e-5)
    plain = sentence_transformers.SparseEncoder(modules=[document, SpladePooling("max")], device="cpu")
    plain.save(str(tmp_path / "plain"))  # a Transformer, fill-mask: read as the MLMTransformer it replaces
    np.testing.assert_allclose(dense_rows(Embedder.load(tmp_path / "plain").encode_sparse(TEXTS), 30522),
                               plain.encode(TEXTS, convert_to_tensor=True).to_dense().numpy(), rtol=1e-4, atol=5e-5)


# --- training: kbert train --task sparse ------------------------------------------------------------------------

def test_splades_ranking_loss_is_cross_entropy_over_dot_products():
    from kbert.training.contrastive import InBatchNegatives

    views = np.abs(np.random.default_rng(1).normal(size=(3, 3, 6))).astype("float32")
    documents = np.concatenate([views[:, 1], views[:, 2]])
    scores = views[:, 0] @ documents.T  # unnormalised: a sparse vector's length is part of its score
    expected = -(scores[np.arange(3), np.arange(3)] - np.log(np.exp(scores).sum(axis=1)))
    got = InBatchNegatives(1.0, normalize=False)(np.zeros(3), views)
    np.testing.assert_allclose(float(got), expected.mean(), rtol=1e-5)
    assert InBatchNegatives.from_config(InBatchNegatives(normalize=False).get_config()).normalize is False


def test_the_flops_regularizer_is_numpys_and_warms_up_quadratically():
    from kbert.training.contrastive import FlopsRegularization

    views = np.abs(np.random.default_rng(2).normal(size=(4, 3, 5))).astype("float32")
    flops = lambda vectors: float((vectors.mean(axis=0) ** 2).sum())  # noqa: E731
    full = 0.3 * flops(views[:, 0]) + 0.1 * flops(views[:, 1:].reshape(-1, 5))
    layer = FlopsRegularization(query_weight=0.3, document_weight=0.1, warmup_steps=4)
    for step in range(1, 6):  # the weight's share: (1/4)², (2/4)², (3/4)², then all of it
        assert np.array_equal(keras.ops.convert_to_numpy(layer(views, training=True)), views)
        np.testing.assert_allclose(float(layer.losses[-1]), full * min(step / 4, 1) ** 2, rtol=1e-5)
    layer(views, training=False)
    assert not layer.losses  # nothing added outside training
    assert FlopsRegularization.from_config(layer.get_config()).get_config() == layer.get_config()


@pytest.mark.examples  # a whole run (tens of seconds): CI's example step runs it
def test_kbert_train_sparse_regularizes_towards_fewer_terms_and_writes_a_sparse_encoder(tmp_path):
    from kbert.cli.main import main
    from kbert.embeddings.embedder import Embedder

    rows = [line.split("\t")[0] for line in
            shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()[:96]]
    halves = [(text[:len(text) // 2], text[len(text) // 2:]) for text in rows if len(text) > 8]
    data = write(tmp_path, "triplets.tsv", "".join(f"{a}\t{b}\t{halves[(i + 7) % len(halves)][0]}\n"
                                                   for i, (a, b) in enumerate(halves)))
    out = tmp_path / "splade"
    assert main(["train", "--task", "sparse", "--train", str(data), "--valid", str(data), "--config",
                 bundled_config_path("bert_tiny"), "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
                 "--batch-size", "16", "--maxlen", "32", "--epochs", "2", "--lr", "5e-4", "--query-regularizer", "1",
                 "--document-regularizer", "1", "--out", str(out)]) == 0
    state = json.loads((out / "training.json").read_text(encoding="utf-8"))
    assert (state["loss"], state["pooling"], state["query_regularizer"]) == ("splade", "splade max relu", 1.0)
    first, last = state["history"]
    for key in ("query_active_dimensions", "document_active_dimensions"):
        assert last[key] < 0.9 * first[key], (key, first[key], last[key])  # FLOPS prunes terms
    assert 0 <= last["val_score"] <= 1
    embedder = Embedder.load(out)
    indices, values = embedder.encode_sparse(["房间很大"])[0]
    assert embedder.output.name == "sparse" and 0 < indices.size < embedder.dimensions and (values > 0).all()


@pytest.mark.examples
def test_kbert_train_sparse_inference_free_reads_queries_by_inverse_document_frequency(tmp_path):
    """--inference-free: the documents are SPLADE's, a query's vector the table of each id's BM25 IDF over the
    training documents (checked against NumPy); the directory is a Router folder whose queries are read by the
    table, and kbert reads it back alike."""
    from kbert.cli.main import main
    from kbert.embeddings.embedder import Embedder

    rows = [line.split("\t")[0] for line in
            shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()[:64]]
    halves = [(text[:len(text) // 2], text[len(text) // 2:]) for text in rows if len(text) > 8]
    data = write(tmp_path, "pairs.tsv", "".join(f"{a}\t{b}\n" for a, b in halves))
    out = tmp_path / "inference-free"
    assert main(["train", "--task", "sparse", "--inference-free", "--train", str(data), "--valid", str(data),
                 "--config", bundled_config_path("bert_tiny"), "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
                 "--batch-size", "16", "--maxlen", "32", "--epochs", "1", "--lr", "5e-4", "--out", str(out)]) == 0
    state = json.loads((out / "training.json").read_text(encoding="utf-8"))
    assert state["inference_free"] is True and 0 <= state["history"][-1]["val_score"] <= 1
    assert json.loads((out / "modules.json").read_text())[0]["type"] == "sentence_transformers.base.modules.router.Router"
    embedder = Embedder.load(out)
    tokenizer = embedder.static_query.tokenizer
    documents = [set(ids) for ids, _ in tokenizer.ids_and_offsets(sorted({b for _, b in halves}))]
    frequency = np.zeros(embedder.dimensions)
    for ids in documents:
        frequency[list(ids)] += 1
    query = "房间很大"
    ids = sorted(set(tokenizer.ids_and_offsets([query])[0][0]))
    expected = np.log1p((len(documents) - frequency[ids] + 0.5) / (frequency[ids] + 0.5))
    indices, values = embedder.encode_sparse([query], role="query")[0]
    assert indices.tolist() == ids
    np.testing.assert_allclose(values, expected, rtol=1e-5)
    indices, values = embedder.encode_sparse([query], role="document")[0]  # the model's: expanded terms
    assert indices.size > 0 and (values > 0).all()


@pytest.mark.examples
def test_kbert_train_sparse_inference_free_learns_its_query_table_at_its_own_rate(tmp_path):
    """--query-learning-rate: the table starts from the IDF and learns at its own rate. An entry no training query
    holds gets no gradient, so it only decays (AdamW's weight decay, one factor for all of them); a query's entries
    move by more than the model's rate allows (Adam moves a weight by about its rate a step, at most), so the table
    learnt at its own; the special tokens stay 0; the folder's table is not frozen."""
    from kbert.cli.main import main
    from kbert.embeddings.embedder import Embedder

    rows = [line.split("\t")[0] for line in
            shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()[:64]]
    halves = [(text[:len(text) // 2], text[len(text) // 2:]) for text in rows if len(text) > 8]
    data = write(tmp_path, "pairs.tsv", "".join(f"{a}\t{b}\n" for a, b in halves))
    out, learning_rate = tmp_path / "learned", 5e-4
    assert main(["train", "--task", "sparse", "--inference-free", "--query-learning-rate", "0.02", "--train",
                 str(data), "--config", bundled_config_path("bert_tiny"), "--vocab",
                 str(shared_path("vocab", "chinese_vocab.txt")), "--batch-size", "16", "--maxlen", "32",
                 "--epochs", "1", "--lr", str(learning_rate), "--out", str(out)]) == 0
    state = json.loads((out / "training.json").read_text(encoding="utf-8"))
    assert state["query_learning_rate"] == 0.02
    embedder = Embedder.load(out)
    table, tokenizer = embedder.static_query.weights, embedder.static_query.tokenizer
    assert embedder.static_query.frozen is False
    documents = [set(ids) for ids, _ in tokenizer.ids_and_offsets(sorted({b for _, b in halves}))]
    frequency = np.zeros(embedder.dimensions)
    for ids in documents:
        frequency[list(ids)] += 1
    idf = np.log1p((len(documents) - frequency + 0.5) / (frequency + 0.5))
    special = [tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id]
    assert not table[special].any()
    in_queries = sorted({index for ids, _ in tokenizer.ids_and_offsets([a for a, _ in halves]) for index in ids})
    elsewhere = np.setdiff1d(np.arange(embedder.dimensions), in_queries + special)
    decay = table[elsewhere] / idf[elsewhere]
    np.testing.assert_allclose(decay, decay[0], rtol=1e-5)  # one factor: weight decay, no gradient
    assert 0.99 < decay[0] < 1
    moved = np.abs(table[in_queries] - idf[in_queries] * decay[0])
    steps = len(state["history"]) * math.ceil(len(halves) / 16)
    assert moved.max() > 2 * steps * learning_rate, moved.max()  # past what the model's rate could move it


def test_a_loss_other_than_splades_is_refused_for_a_sparse_encoder(tmp_path, capsys):
    from kbert.cli.main import main

    data = write(tmp_path, "pairs.tsv", "房间很大\t房间宽敞\n服务很好\t服务周到\n")
    code = main(["train", "--task", "sparse", "--loss", "cosent", "--train", str(data), "--config",
                 bundled_config_path("bert_tiny"), "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
                 "--maxlen", "32", "--out", str(tmp_path / "out")])
    assert code != 0 and "--loss cosent: a sparse encoder trains with SPLADE's in-batch ranking loss" in \
        capsys.readouterr().err and not (tmp_path / "out").exists()



@pytest.mark.parametrize("extra, message", [
    (["--task", "embed", "--inference-free"], "--inference-free: a weight table for the queries is for --task sparse"),
    (["--task", "sparse", "--query-learning-rate", "1e-3"], "--query-learning-rate: the rate of an inference-free"),
    (["--task", "sparse", "--inference-free", "--query-learning-rate", "-1"],
     "query_learning_rate (--query-learning-rate) must be a finite positive number, got -1.0")])
def test_the_query_tables_options_are_refused_where_they_mean_nothing(tmp_path, capsys, extra, message):
    from kbert.cli.main import main

    data = write(tmp_path, "pairs.tsv", "房间很大\t房间宽敞\n服务很好\t服务周到\n")
    code = main(["train", *extra, "--train", str(data), "--config", bundled_config_path("bert_tiny"), "--vocab",
                 str(shared_path("vocab", "chinese_vocab.txt")), "--maxlen", "32", "--out", str(tmp_path / "out")])
    assert code != 0 and message in capsys.readouterr().err and not (tmp_path / "out").exists()

# --- evaluation: exact retrieval through an inverted index -------------------------------------------------------

def test_the_inverted_index_scores_are_the_dense_dot_products():
    from kbert.embeddings.sparse import sparse_terms
    from kbert.embeddings.sparse import SparseIndex

    rng = np.random.default_rng(4)
    dense = np.where(rng.random((30, 50)) < 0.1, rng.random((30, 50)), 0).astype("float32")
    dense[7] = 0  # a document without a term
    queries = np.where(rng.random((5, 50)) < 0.2, rng.random((5, 50)), 0).astype("float32")
    index = SparseIndex([sparse_terms(row) for row in dense], len(dense))
    got = np.stack([index.scores(*sparse_terms(query)) for query in queries])
    np.testing.assert_allclose(got, queries @ dense.T, rtol=1e-6)


def test_kbert_evaluate_ranks_a_sparse_encoders_documents_by_dot_product(sparse_folder, tmp_path, capsys):
    from kbert.embeddings.embedder import Embedder

    corpus = TEXTS + ["A woman is playing violin.", "Two men pushed carts through the woods."]
    result, queries = evaluated_on_prefixes(sparse_folder, tmp_path, capsys, corpus, 20)
    embedder = Embedder.load(sparse_folder)
    assert result["mrr@10"] == pytest.approx(mean_reciprocal_rank(embedder.encode(queries) @ embedder.encode(corpus).T))
    terms = [ids.size for ids, _ in embedder.encode_sparse(corpus)]
    assert result["document_terms"] == pytest.approx(np.mean(terms))


def test_kbert_evaluate_fuses_a_dense_and_a_sparse_ranking_by_reciprocal_ranks(sparse_folder, tmp_path, capsys):
    """Hybrid search: each model's own scores, and the ranking fused by 1 / (60 + rank) counted here."""
    from kbert.embeddings.embedder import Embedder

    corpus = TEXTS + ["A woman is playing violin.", "Two men pushed carts through the woods.", "A man plays drums."]
    result, queries = evaluated_on_prefixes(minilm_dir(), tmp_path, capsys, corpus, 14, "--fuse", str(sparse_folder))
    dense, sparse = Embedder.load(minilm_dir()), Embedder.load(sparse_folder)
    own = [dense.encode(queries, normalize=True) @ dense.encode(corpus, normalize=True).T,
           sparse.encode(queries) @ sparse.encode(corpus).T]
    assert [model["mrr@10"] for model in result["models"]] == pytest.approx([mean_reciprocal_rank(s) for s in own])
    assert result["models"][1]["document_terms"] > 0 and result["fused_with"] == str(sparse_folder)
    ranks = [1 + np.argsort(np.argsort(-scores, axis=1, kind="stable"), axis=1) for scores in own]
    fused = 1 / (60 + ranks[0]) + 1 / (60 + ranks[1])
    # a tie goes to the document the dense ranking puts first
    place = [1 + sum(row[j] > row[i] or (row[j] == row[i] and first[j] < first[i]) for j in range(len(row)))
             for i, (row, first) in enumerate(zip(fused, ranks[0]))]
    assert result["mrr@10"] == pytest.approx(np.mean([1 / rank if rank <= 10 else 0 for rank in place]))


@pytest.mark.parametrize("change, message", [
    (lambda folder: (folder / "query_0_SparseStaticEmbedding" / "model.safetensors").unlink(),
     r"query_0_SparseStaticEmbedding: no model.safetensors \(nor pytorch_model.bin\); the module's weights are "
     "missing"),
    (lambda folder: (folder / "router_config.json").write_text(json.dumps({
        **json.loads((folder / "router_config.json").read_text()), "structure": {
            "query": [["query_0_SparseStaticEmbedding"]], "document": ["document_0_MLMTransformer"]}})),
     "router_config.json: structure: expected each route's list of module names"),
])
def test_a_router_folder_missing_or_malformed_is_named(router_folder, tmp_path, change, message):
    """Before the fix: a missing weight file was read as "pytorch_model.bin: not a zip archive", and a route's
    name that is a list was a TypeError (unhashable)."""
    import shutil

    from kbert.errors import CheckpointError
    from kbert.embeddings.embedder import Embedder

    copy = tmp_path / "copy"
    shutil.copytree(router_folder, copy)
    change(copy)
    with pytest.raises(CheckpointError, match=message):
        Embedder.load(copy)

