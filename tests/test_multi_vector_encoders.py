"""Multi-vector encoders (ColBERT): sentence-transformers 6's `MultiVectorEncoder` folders (a Transformer, a
token-level `Dense`, a `MultiVectorMask` and a token-level `Normalize`) read, encoded as queries and documents,
written back, embedded from the CLI and scored by MaxSim.

Without torch: `TokenEmbedding`'s hidden ids (a query's expansion, which its own tokens do not attend to), MaxSim
against NumPy, and a folder kbert writes (a small random BERT, the real all-MiniLM-L6-v2's tokenizer). In the
parity venv: sentence-transformers 6's `encode_query`, `encode_document` and `encode` on random BERT and DistilBERT
models that transformers builds, with each expansion, both ways.
"""

import json
import string

import keras
import numpy as np
import pytest

from conftest import evaluated_on_prefixes, kbert_in_process, mean_reciprocal_rank, minilm_dir, write

TEXTS = ["A man is eating food.", "drums", "The girl, carrying a baby on her back in the park!",
         "Someone in a gorilla costume is playing a set of drums while a crowd watches."]


# --- the parts --------------------------------------------------------------------------------------------------

def test_hidden_ids_look_up_their_token_and_are_masked(tmp_path):
    """Shapes, masks, get_config round trip, .keras with safe_mode=True."""
    from kbert.layers import TokenEmbedding

    layer = TokenEmbedding(10, 4, mask_zero=True, hidden_ids=True, embeddings_initializer="random_normal")
    ids = np.array([[2, 3, -4, 0], [-3, 5, 0, 0]])
    vectors = keras.ops.convert_to_numpy(layer(ids))
    assert vectors.shape == (2, 4, 4)
    np.testing.assert_array_equal(vectors[0, 2], vectors[0, 1])  # id -4 is token 3, hidden
    assert keras.ops.convert_to_numpy(layer.compute_mask(ids)).tolist() == [[True, True, False, False],
                                                                            [False, True, False, False]]
    assert TokenEmbedding.from_config(layer.get_config()).get_config() == layer.get_config()
    with pytest.raises(Exception, match=r"ids must be in \[0, 10\)"):
        layer.check_ids(np.array([[-11]]))
    tokens = keras.Input((None,), dtype="int32")
    model = keras.Model(tokens, layer(tokens))
    model.save(tmp_path / "model.keras")
    restored = keras.models.load_model(tmp_path / "model.keras", safe_mode=True)
    np.testing.assert_allclose(restored.predict(ids, verbose=0), vectors, atol=1e-6)


def test_maxsim_is_the_sum_of_each_query_vectors_best_dot_product():
    from kbert.embeddings.multi_vector import MaxSimIndex, maxsim

    rng = np.random.default_rng(0)
    documents = [rng.normal(size=(length, 8)).astype("float32") for length in (5, 1, 0, 9)]
    query = rng.normal(size=(4, 8)).astype("float32")
    expected = [sum(max(q @ d for d in document) for q in query) if len(document) else 0.0 for document in documents]
    np.testing.assert_allclose(MaxSimIndex(documents).scores(query), expected, rtol=1e-5)
    np.testing.assert_allclose(maxsim(query, documents), expected, rtol=1e-5)


# --- a multi-vector folder kbert writes ---------------------------------------------------------------------------

def multi_vector_embedder(**settings):
    """A ColBERT embedder on a random 2-layer BERT with MiniLM's vocabulary and tokenizer: 16-value token vectors,
    normalised, queries expanded to 16 tokens, the document punctuation skipped (PyLate's defaults, smaller)."""
    from kbert import build_transformer_model
    from kbert.embeddings.multi_vector import MultiVectorOutput, QueryExpansion
    from kbert.layers import L2Normalize
    from kbert.embeddings.embedder import Embedder
    from kbert.embeddings.kinds import embedding_model
    from kbert.tokenizers.tokenizer_json import folder_tokenizer

    keras.utils.set_random_seed(5)
    config = {"model_type": "bert", "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64}
    bert = build_transformer_model(config)
    spec = MultiVectorOutput(**{"expansion": QueryExpansion("fixed", 16),
                              "skiplist_words": tuple(string.punctuation), **settings})
    tokens = embedding_model(bert, spec)  # its own inputs: hidden expansion is a graph traced anew
    vectors = keras.layers.Dense(16, use_bias=False, name="Embedding-Dense-0")(tokens.outputs[0])
    model = keras.Model(tokens.inputs, L2Normalize(name="Embedding-Normalize")(vectors))
    return Embedder(model, folder_tokenizer(str(minilm_dir())), 64, True, "", bert, spec,
                    prompts={"query": "query: ", "document": "passage: "})


@pytest.fixture(scope="module")
def colbert_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("colbert") / "colbert"
    multi_vector_embedder().save(folder)
    return folder


def test_a_multi_vector_folder_reads_back_in_sentence_transformers_6s_layout(colbert_folder):
    from kbert.embeddings.embedder import Embedder

    modules = json.loads((colbert_folder / "modules.json").read_text())
    assert [module["type"].rsplit(".", 1)[-1] for module in modules] == ["Transformer", "Dense", "MultiVectorMask",
                                                                          "Normalize"]
    assert json.loads((colbert_folder / "1_Dense" / "config.json").read_text())["module_input_name"] == \
        "token_embeddings"
    settings = json.loads((colbert_folder / "sentence_bert_config.json").read_text())
    assert settings["query_expansion"] == {"strategy": "fixed", "length": 16, "attend": False, "token": None}
    embedder = Embedder.load(colbert_folder)
    assert embedder.output.name == "multi-vector" and embedder.output == multi_vector_embedder().output
    np.testing.assert_allclose(embedder.encode_multi_vector(TEXTS, "query")[2],
                               multi_vector_embedder().encode_multi_vector(TEXTS, "query")[2], atol=1e-6)


def test_an_expanded_querys_own_tokens_do_not_attend_to_its_expansion(colbert_folder):
    """The real tokens' vectors of an expanded query are those of the text alone; each [MASK] gives a vector of its
    own. Attended expansion (attend true) changes the real tokens' vectors."""
    from kbert.embeddings.multi_vector import QueryExpansion
    from kbert.embeddings.embedder import Embedder

    embedder = Embedder.load(colbert_folder)
    texts = ["drums", "a crowd watches the gorilla play the drums"]  # no punctuation to skip
    queries = embedder.encode_multi_vector(texts, "query", batch_size=3, prompt="")
    alone = embedder.encode_multi_vector(texts, None, prompt="")  # unexpanded
    for query, plain in zip(queries, alone):
        assert query.shape == (16, 16) and len(plain) < 16
        np.testing.assert_allclose(query[:len(plain)], plain, atol=1e-5)
        assert np.abs(query[len(plain):] - query[-1]).max(axis=1)[:-1].min() > 1e-3  # each position its own
    attended = multi_vector_embedder(expansion=QueryExpansion("fixed", 16, attend=True))
    query, plain = (attended.encode_multi_vector(["drums"], role, prompt="")[0] for role in ("query", None))
    assert np.abs(query[:len(plain)] - plain).max() > 1e-3


def test_documents_leave_their_punctuation_out(colbert_folder):
    from kbert.embeddings.embedder import Embedder

    embedder = Embedder.load(colbert_folder)
    document = embedder.encode_multi_vector(["drums, loud!"], "document")[0]
    tokens = embedder.tokenizer.encode("passage: drums, loud!", maxlen=64)[0]
    assert len(tokens) - len(document) == 3  # ":", "," and "!"
    query = embedder.encode_multi_vector(["drums, loud!"], "query")[0]
    assert len(query) == 16  # a query keeps them


def rewrite(folder, tmp_path, path, change):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    file = copy / path
    file.write_text(json.dumps(change(json.loads(file.read_text()))))
    return copy


@pytest.mark.parametrize("path, change, message", [
    ("config_sentence_transformers.json", lambda c: {**c, "model_type": "SentenceTransformer"},
     "a MultiVectorMask belongs to a MultiVectorEncoder"),
    ("2_MultiVectorMask/config.json", lambda c: {**c, "keep_only_token_ids": [5]}, "keep_only_token_ids"),
    ("sentence_bert_config.json", lambda c: {**c, "query_expansion": {"strategy": "pad", "length": 8}},
     "query_expansion .*expected null or an object"),
    ("sentence_bert_config.json", lambda c: {**c, "query_length": 8}, "query_length 8 is below"),
    ("1_Dense/config.json", lambda c: {**c, "module_input_name": "sentence_embedding"},
     "a Dense reads the sentence_embedding; kbert computes it on the token_embeddings"),
    ("config_sentence_transformers.json", lambda c: {**c, "model_type": "ColBERT", "query_prefix": "[Q] "},
     "expected one Pooling, SpladePooling or MultiVectorMask module after the Transformer, found 2"),
    ("1_Dense/config.json", lambda c: {**c, "use_residual": True}, "use_residual true: a projection added to its "
                                                                    "input"),
    ("2_MultiVectorMask/config.json", lambda c: {**c, "skiplist_tasks": [["document"]]},
     r"skiplist_tasks \[\['document'\]\]: expected a list of query and document"),
    # 200 on a table of 64 positions: each query padded past the last position (a TensorFlow assertion before)
    ("sentence_bert_config.json", lambda c: {**c, "query_expansion": {**c["query_expansion"], "length": 200},
                                             "query_length": 200},
     "sentence_bert_config.json: query_expansion's length 200 is longer than the model's longest input, 64 tokens"),
])
def test_a_multi_vector_folder_kbert_does_not_compute_is_refused_by_name(colbert_folder, tmp_path, path, change,
                                                                        message):
    from kbert.errors import CheckpointError
    from kbert.embeddings.embedder import Embedder

    with pytest.raises(CheckpointError, match=message):
        Embedder.load(rewrite(colbert_folder, tmp_path, path, change))


def test_kbert_embed_writes_each_texts_token_vectors(colbert_folder, tmp_path):
    from kbert.embeddings.embedder import Embedder

    texts = write(tmp_path, "texts.txt", "\n".join(TEXTS) + "\n")
    embedder = Embedder.load(colbert_folder)
    run = kbert_in_process("embed", "--model", str(colbert_folder), str(texts), "--prompt-name", "query")
    assert run.returncode == 0, run.stderr
    lines = [np.array(json.loads(line)["embedding"]) for line in run.stdout.splitlines()]
    for line, expected in zip(lines, embedder.encode_multi_vector(TEXTS, "query"), strict=True):
        np.testing.assert_allclose(line, expected, atol=1e-6)
    out = tmp_path / "vectors.npy"
    run = kbert_in_process("embed", "--model", str(colbert_folder), str(texts), "--npy", str(out))
    assert run.returncode == 0, run.stderr
    vectors, offsets = np.load(out), np.load(tmp_path / "vectors.offsets.npy")
    expected = embedder.encode_multi_vector(TEXTS)
    assert offsets.tolist() == np.cumsum([0] + [len(tokens) for tokens in expected]).tolist()
    np.testing.assert_allclose(vectors[offsets[2]:offsets[3]], expected[2], atol=1e-6)
    again = kbert_in_process("embed", "--model", str(colbert_folder), str(texts), "--npy", str(out))
    assert again.returncode != 0 and "already exists" in again.stderr
    refused = kbert_in_process("embed", "--model", str(colbert_folder), str(texts), "--dimensions", "4")
    assert refused.returncode != 0 and "multi-vector encoder (MultiVectorMask): --dimensions" in refused.stderr
    assert "Traceback" not in refused.stderr


@pytest.mark.parametrize("runtime", [("--runtime", "onnxruntime"), ("--quantize", "int8")], ids=["float32", "int8"])
def test_kbert_embed_runs_a_multi_vector_encoder_on_its_onnx_export(colbert_folder, tmp_path, runtime):
    """The queries' hidden expansion ids (-1 - id) go through the ONNX graph as through Keras's."""
    pytest.importorskip("tf2onnx", reason="ONNX export: pip install 'kbert[onnx]'")
    pytest.importorskip("onnxruntime", reason="ONNX export: pip install 'kbert[onnx]'")
    from kbert.embeddings.embedder import Embedder

    texts = write(tmp_path, "texts.txt", "\n".join(TEXTS) + "\n")
    expected = Embedder.load(colbert_folder).encode_multi_vector(TEXTS, "query")
    run = kbert_in_process("embed", "--model", str(colbert_folder), str(texts), "--prompt-name", "query", *runtime)
    assert run.returncode == 0, run.stderr
    lines = [np.array(json.loads(line)["embedding"]) for line in run.stdout.splitlines()]
    assert [len(line) for line in lines] == [len(tokens) for tokens in expected]
    if runtime[0] == "--runtime":
        for line, tokens in zip(lines, expected):
            np.testing.assert_allclose(line, tokens, atol=1e-4)
    else:  # unit vectors: a token's cosine is its dot product
        cosines = np.concatenate([np.sum(line * tokens, axis=-1) for line, tokens in zip(lines, expected)])
        assert cosines.min() > 0.95 and np.median(cosines) > 0.99


@pytest.mark.examples
def test_the_server_answers_embed_all_by_role_and_refuses_one_vector_routes(colbert_folder):
    pytest.importorskip("fastapi", reason="kbert serve needs FastAPI and uvicorn: pip install 'kbert[serve]'")
    from kbert.embeddings.embedder import Embedder
    from test_serve import post, running_server

    embedder = Embedder.load(colbert_folder)
    with running_server(colbert_folder, "--max-batch", "3") as (url, _):
        for role in ("query", "document", None):
            status, answer = post(url, {"inputs": TEXTS, "prompt_name": role, "truncate": True}, path="/embed_all")
            assert status == 200, answer
            for served, expected in zip(answer, embedder.encode_multi_vector(TEXTS, role), strict=True):
                np.testing.assert_allclose(served, expected, atol=1e-5)
        long = " ".join(["word"] * 30)  # past a query's 16 tokens, within a document's 64
        status, answer = post(url, {"inputs": long, "prompt_name": "query"}, path="/embed_all")
        assert status == 413 and "more than the model's 16 for a query" in answer["error"]
        status, answer = post(url, {"inputs": long, "prompt_name": "query", "truncate": True}, path="/embed_all")
        assert status == 200 and len(answer[0]) == 16
        status, answer = post(url, {"inputs": long, "prompt_name": "document"}, path="/embed_all")
        assert status == 200
        status, answer = post(url, {"inputs": ["a"], "prompt_name": "nope"}, path="/embed_all")
        assert status == 422 and "prompt_name 'nope'" in answer["error"]
        for path, body in (("/embed", {"inputs": ["a"]}), ("/embed_sparse", {"inputs": ["a"]})):
            status, answer = post(url, body, path=path)
            assert status == 400 and "POST /embed_all gives its vectors" in answer["error"], path
        status, answer = post(url, {"input": ["a"]}, path="/v1/embeddings")
        assert status == 400 and "multi-vector encoder" in answer["error"]["message"]
        status, answer = post(url, {"texts": TEXTS[:2]})
        assert status == 200 and set(answer["predictions"][1]) == {"text", "embeddings"}
    with running_server(minilm_dir()) as (url, _):
        status, answer = post(url, {"inputs": ["a"]}, path="/embed_all")
        assert status == 400 and "this model is a dense model: POST /embed gives its vectors" in answer["error"]


def test_kbert_evaluate_ranks_by_maxsim(colbert_folder, tmp_path, capsys):
    from kbert.embeddings.embedder import Embedder
    from kbert.embeddings.multi_vector import maxsim

    corpus = TEXTS + ["A woman is playing violin.", "Two men pushed carts through the woods."]
    result, queries = evaluated_on_prefixes(colbert_folder, tmp_path, capsys, corpus, 12)
    embedder = Embedder.load(colbert_folder)
    documents = embedder.encode_multi_vector(corpus, "document")
    scores = [maxsim(query, documents) for query in embedder.encode_multi_vector(queries, "query")]
    assert result["mrr@10"] == pytest.approx(mean_reciprocal_rank(scores))
    assert result["query_vectors"] == 16
    assert result["document_vectors"] == pytest.approx(np.mean([len(document) for document in documents]))


# --- PyLate's ColBERT folders ------------------------------------------------------------------------------------

PYLATE = {"prompts": {}, "default_prompt_name": None, "similarity_fn_name": "MaxSim", "query_prefix": "[unused0]",
          "document_prefix": "[unused1]", "query_length": 12, "document_length": 20,
          "attend_to_expansion_tokens": False, "skiplist_words": list(string.punctuation)}


def pylate_folder(folder, **settings):
    """A folder as PyLate saves a ColBERT model (read by hand from PyLate's `ColBERT.save`, which lists the
    Transformer and its own Dense in `modules.json` and puts its settings in `config_sentence_transformers.json`):
    a random 2-layer BERT with the real all-MiniLM-L6-v2's (lower-casing) tokenizer, projected to 16 values."""
    import shutil

    from safetensors.numpy import save_file

    from kbert import build_transformer_model, save_hf_weights

    keras.utils.set_random_seed(7)
    bert = build_transformer_model({"model_type": "bert", "vocab_size": 30522, "hidden_size": 32,
                                    "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
                                    "max_position_embeddings": 64})
    folder.mkdir(parents=True)
    save_hf_weights(bert, folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(minilm_dir() / name, folder / name)
    (folder / "1_Dense").mkdir()
    write(folder, "sentence_bert_config.json", json.dumps({"max_seq_length": 59, "do_lower_case": False}))
    write(folder, "modules.json", json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"}]))
    write(folder / "1_Dense", "config.json", json.dumps({
        "in_features": 32, "out_features": 16, "bias": False,
        "activation_function": "torch.nn.modules.linear.Identity", "use_residual": False}))
    projection = np.random.default_rng(7).normal(0, 32 ** -0.5, (16, 32)).astype(np.float32)
    save_file({"linear.weight": projection}, str(folder / "1_Dense" / "model.safetensors"))
    write(folder, "config_sentence_transformers.json", json.dumps({"model_type": "ColBERT", **PYLATE, **settings}))
    return folder


def stanford_folder(folder, **metadata):
    """A folder as Stanford's ColBERT saves a checkpoint (colbert-ir/colbertv2.0's layout, read by hand from its
    `HF_ColBERT`): no modules.json; a `config.json` of `architectures` HF_ColBERT; the BERT's tensors under `bert.`
    beside the projection `linear.weight` (no bias) in one file; its settings in `artifact.metadata`. The BERT and
    projection are `pylate_folder`'s."""
    from safetensors.numpy import load_file, save_file

    pylate = pylate_folder(folder.with_name(folder.name + "-pylate"))
    folder.mkdir(parents=True)
    tensors = {"bert." + name: value for name, value in load_file(str(pylate / "model.safetensors")).items()}
    tensors["linear.weight"] = load_file(str(pylate / "1_Dense" / "model.safetensors"))["linear.weight"]
    save_file(tensors, str(folder / "model.safetensors"))
    config = json.loads((pylate / "config.json").read_text())
    write(folder, "config.json", json.dumps({**config, "architectures": ["HF_ColBERT"]}))
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        (folder / name).write_bytes((pylate / name).read_bytes())
    write(folder, "artifact.metadata", json.dumps({
        "query_token_id": "[unused0]", "doc_token_id": "[unused1]", "query_token": "[Q]", "doc_token": "[D]",
        "query_maxlen": 12, "doc_maxlen": 20, "dim": 16, "mask_punctuation": True, "attend_to_mask_tokens": False,
        "similarity": "cosine", **metadata}))
    return folder


def test_a_stanford_colbert_checkpoint_is_read_as_its_pylate_twin(tmp_path, capsys):
    """A Stanford ColBERT checkpoint (no modules.json) is the same model as the PyLate folder of the same weights and
    settings: the same markers, expansion, cut and skiplist, the same vectors (through `kbert embed` too, and `kbert evaluate` reads it); a folder
    with vocab.txt alone gives them too; `mask_punctuation` false keeps a
    document's punctuation, and a folder without `artifact.metadata` takes ColBERT's defaults (queries of 32)."""
    from kbert.embeddings.embedder import Embedder

    stanford = Embedder.load(stanford_folder(tmp_path / "stanford"))
    pylate = Embedder.load(tmp_path / "stanford-pylate")
    assert stanford.prompts == {"query": "[unused0] ", "document": "[unused1] "}
    assert stanford.output == pylate.output
    for role in ("query", "document"):
        for mine, twin in zip(stanford.encode_multi_vector(TEXTS, role), pylate.encode_multi_vector(TEXTS, role)):
            np.testing.assert_allclose(mine, twin, atol=1e-6, err_msg=role)
    texts = write(tmp_path, "texts.txt", "\n".join(TEXTS) + "\n")
    run = kbert_in_process("embed", "--model", str(tmp_path / "stanford"), str(texts), "--prompt-name", "query")
    assert run.returncode == 0, run.stderr
    for line, expected in zip(run.stdout.splitlines(), stanford.encode_multi_vector(TEXTS, "query"), strict=True):
        np.testing.assert_allclose(np.array(json.loads(line)["embedding"]), expected, atol=1e-6)
    (tmp_path / "beir").mkdir()
    result, _ = evaluated_on_prefixes(tmp_path / "stanford", tmp_path / "beir", capsys, TEXTS, 12)
    assert result["query_vectors"] == 12 and result["mrr@10"] > 0
    kept = Embedder.load(stanford_folder(tmp_path / "kept", mask_punctuation=False))
    assert [len(tokens) for tokens in kept.encode_multi_vector(TEXTS, "document")][2] == 16  # "," and "!" kept
    (tmp_path / "stanford" / "tokenizer.json").unlink()  # vocab.txt alone: its markers still one token each
    for mine, twin in zip(Embedder.load(tmp_path / "stanford").encode_multi_vector(TEXTS, "query"),
                          pylate.encode_multi_vector(TEXTS, "query")):
        np.testing.assert_allclose(mine, twin, atol=1e-6)
    (tmp_path / "stanford" / "artifact.metadata").unlink()
    assert Embedder.load(tmp_path / "stanford").output.expansion.length == 32
    back = Embedder.load(stanford.save(tmp_path / "back"))
    for mine, again in zip(stanford.encode_multi_vector(TEXTS, "query"), back.encode_multi_vector(TEXTS, "query")):
        np.testing.assert_allclose(again, mine, atol=1e-6)


def test_a_damaged_stanford_colbert_checkpoint_is_refused_naming_the_file(tmp_path):
    """A Stanford checkpoint without its projection, or with a marker that is not text, is refused naming the file
    and what was expected."""
    from safetensors.numpy import load_file, save_file

    from kbert.errors import CheckpointError
    from kbert.embeddings.embedder import Embedder

    folder = stanford_folder(tmp_path / "stanford", query_token_id=1)
    with pytest.raises(CheckpointError, match=r"artifact.metadata: query_token_id 1: expected the marker token"):
        Embedder.load(folder)
    write(folder, "artifact.metadata", "{}")
    tensors = load_file(str(folder / "model.safetensors"))
    save_file({name: value for name, value in tensors.items() if name != "linear.weight"},
              str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"model.safetensors: linear.weight: expected floats of shape "
                                              r"\[128, 32\] \(ColBERT's projection \[dim, hidden_size\]\), got missing"):
        Embedder.load(folder)


def test_a_pylate_folder_is_read_with_its_markers_expansion_and_skiplist(tmp_path):
    """PyLate inserts [unused0] (queries) or [unused1] (documents) after [CLS], fills a query with [MASK] up to
    12 tokens, cuts a document at 20, leaves a document's punctuation out, normalises each token's vector: so
    does kbert, and writes it back as a sentence-transformers 6 folder that reads back alike. A folder saved before
    sentence-transformers wrote a model_type is known by PyLate's settings."""
    from kbert.embeddings.multi_vector import QueryExpansion
    from kbert.embeddings.embedder import Embedder

    embedder = Embedder.load(pylate_folder(tmp_path / "pylate"))
    spec = embedder.output
    assert (spec.expansion, spec.document_length, spec.skiplist_tasks) == (QueryExpansion("fixed", 12), 20,
                                                                          ("document",))
    assert embedder.prompts == {"query": "[unused0]", "document": "[unused1]"}
    long = " ".join(["drums"] * 30)
    (query, _), (document, _) = (embedder.role_tokens(embedder.role_prompted([long], role), role)[0]
                                 for role in ("query", "document"))
    assert query[:3] == [101, 1, 3846] and len(query) == 12  # [CLS] [unused0] drums ...
    assert document[:3] == [101, 2, 3846] and len(document) == 20 and document[-1] == 102
    assert embedder.role_tokens(embedder.role_prompted(["drums"], "query"), "query")[0][0] == \
        [101, 1, 3846, 102] + [-1 - 103] * 8  # filled with [MASK], hidden from attention (-1 - id)
    vectors = embedder.encode_multi_vector(TEXTS, "document")
    assert [len(tokens) for tokens in vectors][1:3] == [4, 14]  # [CLS] [unused1] drums [SEP]; 16 less "," and "!"
    np.testing.assert_allclose(np.linalg.norm(vectors[2], axis=1), 1.0, rtol=1e-5)
    back = Embedder.load(embedder.save(tmp_path / "back"))
    for role in ("query", "document"):
        for mine, again in zip(embedder.encode_multi_vector(TEXTS, role), back.encode_multi_vector(TEXTS, role)):
            np.testing.assert_allclose(again, mine, atol=1e-6)
    older = pylate_folder(tmp_path / "older")
    write(older, "config_sentence_transformers.json", json.dumps(PYLATE))  # no model_type
    for mine, again in zip(vectors, Embedder.load(older).encode_multi_vector(TEXTS, "document")):
        np.testing.assert_allclose(again, mine, atol=1e-6)


# --- training: kbert train --task colbert ------------------------------------------------------------------------

def test_maxsim_scores_are_numpys_over_the_scored_tokens(tmp_path):
    """Shapes, masks (an unscored token never counts), get_config round trip, .keras with safe_mode=True; the loss
    is cross-entropy against each query's own positive."""
    from kbert.training.contrastive import InBatchScores, MaxSimScores

    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(6, 5, 4)).astype("float32")  # 2 queries, 2 positives, 2 hard negatives
    scored = (rng.random((6, 5)) < 0.7).astype("int32")
    scored[:, 0] = 1
    layer = MaxSimScores(3)
    got = keras.ops.convert_to_numpy(layer(vectors, scored))
    expected = [[sum(max(q @ d for d, keep in zip(vectors[n], scored[n]) if keep)
                     for q, keep in zip(vectors[i], scored[i]) if keep) for n in range(2, 6)] for i in range(2)]
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert MaxSimScores.from_config(layer.get_config()).get_config() == layer.get_config()
    inputs = [keras.Input((5, 4)), keras.Input((5,), dtype="int32")]
    model = keras.Model(inputs, MaxSimScores(3)(*inputs))
    model.save(tmp_path / "maxsim.keras")
    restored = keras.models.load_model(tmp_path / "maxsim.keras", safe_mode=True)
    np.testing.assert_allclose(restored.predict([vectors, scored], verbose=0), got, rtol=1e-5)
    loss = float(InBatchScores(2.0)(np.zeros(2), got))
    logits = got / 2.0
    expected_loss = np.mean([np.log(np.exp(row).sum()) - row[i] for i, row in enumerate(logits)])
    assert loss == pytest.approx(expected_loss, rel=1e-5)


def colbert_training_rows(tmp_path):
    """Triplets of real reviews: a review's first half, its second half, another review's first half."""
    from conftest import shared_path

    rows = [line.split("\t")[0] for line in
            shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()[:96]]
    halves = [(text[:len(text) // 2], text[len(text) // 2:]) for text in rows if len(text) > 8]
    return write(tmp_path, "triplets.tsv", "".join(f"{a}\t{b}\t{halves[(i + 7) % len(halves)][0]}\n"
                                                   for i, (a, b) in enumerate(halves)))


def train_colbert(tmp_path, data, *extra) -> dict:
    """`kbert train --task colbert` of a tiny BERT on `data`; its training.json."""
    from conftest import shared_path

    from kbert import bundled_config_path
    from kbert.cli.main import main

    assert main(["train", "--task", "colbert", "--train", str(data), "--valid", str(data), "--config",
                 bundled_config_path("bert_tiny"), "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
                 "--batch-size", "16", "--maxlen", "32", "--query-length", "12", "--lr", "1e-3",
                 "--out", str(tmp_path / "colbert"), *extra]) == 0
    return json.loads((tmp_path / "colbert" / "training.json").read_text(encoding="utf-8"))


def test_a_query_length_past_the_models_positions_is_refused_before_training(tmp_path, capsys):
    from conftest import shared_path

    from kbert import bundled_config_path
    from kbert.cli.main import main

    data = write(tmp_path, "pairs.tsv", "a query\ta passage\n" * 4)
    assert main(["train", "--task", "colbert", "--train", str(data), "--config", bundled_config_path("bert_tiny"),
                 "--vocab", str(shared_path("vocab", "chinese_vocab.txt")), "--maxlen", "32", "--query-length",
                 "100000", "--out", str(tmp_path / "colbert")]) != 0
    assert "--query-length 100000: a query expanded to it is longer than the model's longest input, 64 tokens" in \
        capsys.readouterr().err
    assert not (tmp_path / "colbert").exists()


@pytest.mark.examples
def test_kbert_train_colbert_ranks_by_maxsim_and_writes_a_multi_vector_encoder(tmp_path):
    from kbert.embeddings.embedder import Embedder

    state = train_colbert(tmp_path, colbert_training_rows(tmp_path), "--epochs", "3")
    assert (state["loss"], state["pooling"], state["query_length"]) == ("maxsim", "multi-vector", 12)
    first, *_, last = state["history"]
    assert last["loss"] < first["loss"] and last["val_score"] >= first["val_score"], state["history"]
    embedder = Embedder.load(tmp_path / "colbert")
    assert embedder.output.name == "multi-vector" and embedder.output.expansion.length == 12
    query, document = embedder.encode_multi_vector(["房间很大"], "query")[0], \
        embedder.encode_multi_vector(["房间很大，很干净。"], "document")[0]
    assert query.shape == (12, 128) and document.shape[1] == 128
    np.testing.assert_allclose(np.linalg.norm(document, axis=1), 1.0, rtol=1e-5)


def test_score_distillation_is_the_kl_divergence_over_each_querys_own_documents():
    from kbert.training.contrastive import ScoreDistillation

    rng = np.random.default_rng(2)
    teacher, scores = rng.normal(size=(3, 2)), rng.normal(size=(3, 6)) * 3  # 3 queries, a positive and a negative

    def softmax(x):
        return np.exp(x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)

    own = np.stack([scores[np.arange(3), np.arange(3)], scores[np.arange(3), 3 + np.arange(3)]], axis=1) / 2.0
    p, q = softmax(teacher), softmax(own)
    assert float(ScoreDistillation(2.0)(teacher, scores)) == pytest.approx(np.mean((p * np.log(p / q)).sum(1)),
                                                                          rel=1e-5)


@pytest.mark.examples
def test_kbert_train_colbert_distils_a_kbert_reranker(tmp_path):
    from conftest import shared_path

    from kbert import bundled_config_path
    from kbert.cli.main import main

    data = colbert_training_rows(tmp_path)
    pairs = write(tmp_path, "pairs.tsv", "".join(f"{q}\t{p}\t1\n{q}\t{n}\t0\n" for q, p, n in
                                                 (line.split("\t") for line in data.read_text("utf-8").splitlines())))
    assert main(["train", "--task", "rerank", "--train", str(pairs), "--config", bundled_config_path("bert_tiny"),
                 "--vocab", str(shared_path("vocab", "chinese_vocab.txt")), "--batch-size", "16", "--maxlen", "64",
                 "--epochs", "1", "--lr", "1e-3", "--out", str(tmp_path / "reranker")]) == 0
    state = train_colbert(tmp_path, data, "--epochs", "2", "--teacher", str(tmp_path / "reranker"))
    assert (state["loss"], state["teacher"]) == ("distillation", str(tmp_path / "reranker"))
    first, last = state["history"]
    assert last["loss"] < first["loss"], state["history"]
    pairless = write(tmp_path, "pairs_only.tsv", "".join(line.rsplit("\t", 1)[0] + "\n"
                                                          for line in data.read_text("utf-8").splitlines()))
    run = kbert_in_process("train", "--task", "colbert", "--train", str(pairless), "--config",
                           str(bundled_config_path("bert_tiny")), "--vocab",
                           str(shared_path("vocab", "chinese_vocab.txt")), "--teacher", str(tmp_path / "reranker"),
                           "--maxlen", "32", "--out", str(tmp_path / "refused"))
    assert run.returncode != 0 and "give each query a positive and a hard negative" in run.stderr


# --- the same, as sentence-transformers itself computes it (CI's parity venv) ------------------------------------

EXPANSIONS = [None, {"strategy": "fixed", "attend": False, "length": 12},
              {"strategy": "min", "attend": True, "length": 10}]


def random_backbone(torch, transformers, family):
    """A random encoder that transformers builds (BERT, DistilBERT, ModernBERT, EuroBERT or DeBERTa-v3), with
    MiniLM's vocabulary ([PAD] 0)."""
    torch.manual_seed(0)
    sizes = {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
             "intermediate_size": 64, "max_position_embeddings": 64, "pad_token_id": 0}
    if family == "bert":
        return transformers.BertModel(transformers.BertConfig(**sizes))
    if family == "modernbert":  # windows of ±8 tokens, which a query's expansion crosses; none of them all hidden
        # (transformers' own kernels differ for a window of hidden keys alone: sdpa and eager by 7e-3)
        return transformers.ModernBertModel(transformers.ModernBertConfig(**sizes, local_attention=16,
                                                                          global_attn_every_n_layers=2))
    if family == "eurobert":
        return transformers.EuroBertModel(transformers.EuroBertConfig(**sizes, num_key_value_heads=1,
                                                                      bos_token_id=101, eos_token_id=102))
    if family == "deberta_v2":
        return transformers.DebertaV2Model(transformers.DebertaV2Config(
            **sizes, relative_attention=True, position_buckets=8, pos_att_type=["p2c", "c2p"],
            norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False))
    return transformers.DistilBertModel(transformers.DistilBertConfig(
        vocab_size=30522, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64))


@pytest.mark.parity
@pytest.mark.parametrize("family", ["bert", "distilbert", "modernbert", "eurobert", "deberta_v2"])
@pytest.mark.parametrize("expansion", EXPANSIONS, ids=["none", "fixed", "min-attended"])
def test_sentence_transformers_multi_vector_encoders_both_ways(family, expansion, tmp_path):
    torch = pytest.importorskip("torch", reason="pip install '.[parity]' (with CPU torch) for the parity tests")
    transformers = pytest.importorskip("transformers", reason="pip install '.[parity]'")
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install '.[parity]'")
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    from kbert.embeddings.embedder import Embedder

    random_backbone(torch, transformers, family).save_pretrained(tmp_path / "encoder")
    transformers.AutoTokenizer.from_pretrained(str(minilm_dir())).save_pretrained(tmp_path / "encoder")
    transformer = Transformer(str(tmp_path / "encoder"), document_length=20, query_expansion=expansion)
    theirs = sentence_transformers.MultiVectorEncoder(modules=[
        transformer, Dense(32, 16, bias=False, activation_function=torch.nn.Identity(),
                           module_input_name="token_embeddings"),
        MultiVectorMask(skiplist_words=list(string.punctuation), skiplist_tasks=["query", "document"]),
        Normalize(module_input_name="token_embeddings")], prompts={"query": "query: "}, device="cpu")
    theirs.save(str(tmp_path / "st"))
    mine = Embedder.load(tmp_path / "st")
    mine.save(tmp_path / "back")
    read_back = sentence_transformers.MultiVectorEncoder(str(tmp_path / "back"), device="cpu")
    for role, encode, encode_back in ((None, theirs.encode, read_back.encode),
                                      ("query", theirs.encode_query, read_back.encode_query),
                                      ("document", theirs.encode_document, read_back.encode_document)):
        expected = [tokens.numpy() for tokens in encode(TEXTS)]
        got = mine.encode_multi_vector(TEXTS, role, batch_size=3)
        assert [len(tokens) for tokens in got] == [len(tokens) for tokens in expected], role
        for tokens, theirs_tokens, back in zip(got, expected, encode_back(TEXTS)):
            np.testing.assert_allclose(tokens, theirs_tokens, atol=2e-6, err_msg=str(role))
            np.testing.assert_allclose(back.numpy(), theirs_tokens, atol=2e-6, err_msg=str(role))


@pytest.mark.parity
@pytest.mark.parametrize("attend", [False, True], ids=["expansion-hidden", "expansion-attended"])
def test_a_pylate_folder_is_encoded_as_sentence_transformers_6_encodes_it(attend, tmp_path):
    """sentence-transformers 6 loads a PyLate folder as a MultiVectorEncoder (its markers registered as tokens, its
    mask and normalisation added): kbert's query and document vectors are its, and kbert's saved folder reads back in
    it alike."""
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install '.[parity]'")
    from kbert.embeddings.embedder import Embedder

    folder = pylate_folder(tmp_path / "pylate", attend_to_expansion_tokens=attend)
    theirs = sentence_transformers.MultiVectorEncoder(str(folder), device="cpu")
    mine = Embedder.load(folder)
    read_back = sentence_transformers.MultiVectorEncoder(mine.save(tmp_path / "back"), device="cpu")
    for role, encode, encode_back in (("query", theirs.encode_query, read_back.encode_query),
                                      ("document", theirs.encode_document, read_back.encode_document)):
        expected = [tokens.numpy() for tokens in encode(TEXTS)]
        got = mine.encode_multi_vector(TEXTS, role, batch_size=3)
        assert [len(tokens) for tokens in got] == [len(tokens) for tokens in expected], role
        for tokens, theirs_tokens, back in zip(got, expected, encode_back(TEXTS)):
            np.testing.assert_allclose(tokens, theirs_tokens, atol=2e-6, err_msg=role)
            np.testing.assert_allclose(back.numpy(), theirs_tokens, atol=2e-6, err_msg=role)


@pytest.mark.parity
@pytest.mark.parametrize("metadata, tokenizer", [({}, True),
                                                 ({"attend_to_mask_tokens": True, "mask_punctuation": False}, True),
                                                 ({}, False)],
                         ids=["classic", "attended-punctuation-kept", "vocab-txt-alone"])
def test_a_stanford_colbert_checkpoint_is_encoded_as_sentence_transformers_6_encodes_it(metadata, tokenizer,
                                                                                          tmp_path):
    """sentence-transformers 6 loads a Stanford ColBERT checkpoint (HF_ColBERT, artifact.metadata; its tokenizer
    from tokenizer.json, or converted from vocab.txt) as a MultiVectorEncoder: kbert's query and document vectors
    are its."""
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install '.[parity]'")
    from kbert.embeddings.embedder import Embedder

    folder = stanford_folder(tmp_path / "stanford", **metadata)
    if not tokenizer:
        (folder / "tokenizer.json").unlink()
    theirs = sentence_transformers.MultiVectorEncoder(str(folder), device="cpu")
    mine = Embedder.load(folder)
    for role, encode in (("query", theirs.encode_query), ("document", theirs.encode_document)):
        expected = [tokens.numpy() for tokens in encode(TEXTS)]
        got = mine.encode_multi_vector(TEXTS, role, batch_size=3)
        assert [len(tokens) for tokens in got] == [len(tokens) for tokens in expected], role
        for tokens, theirs_tokens in zip(got, expected):
            np.testing.assert_allclose(tokens, theirs_tokens, atol=2e-6, err_msg=role)
