"""bge-m3's three outputs from one folder: its sentence-transformers dense vector, and the sparse and ColBERT heads
of its `sparse_linear.pt` and `colbert_linear.pt` (read without running their pickle).

Without torch: the heads' refusals (a missing file, a crafted pickle, a head on a model that is not dense). In the
parity venv: a random XLM-R folder with random heads that torch saves, each head against FlagEmbedding's formulas
(`_sparse_embedding` with `_process_token_weights`, `_colbert_embedding` with `_process_colbert_vecs`, read by hand)
computed on transformers' `XLMRobertaModel`, and `kbert embed --head`.
"""

import json

import numpy as np
import pytest

from conftest import (evaluated_on_prefixes, kbert_in_process, mean_reciprocal_rank, write, write_crafted_pt,
                      xlm_roberta_embedder_folder)

TEXTS = ["A man is eating food.", "drums drums drums", "The girl is carrying a baby on her back in the park.",
         "Someone in a gorilla costume is playing a set of drums."]


@pytest.fixture(scope="module")
def dense_folder(tmp_path_factory):
    return xlm_roberta_embedder_folder(tmp_path_factory.mktemp("m3") / "m3", TEXTS)


def test_a_head_whose_file_is_missing_or_crafted_is_refused(dense_folder, tmp_path):
    import shutil

    from kbert.errors import CheckpointError, KbertError
    from kbert.embeddings.embedder import Embedder

    with pytest.raises(CheckpointError, match=r"sparse_linear.pt: missing; --head sparse reads bge-m3's "
                                              r"sparse_linear.pt \(this folder's extra heads: none\)"):
        Embedder.load(dense_folder, head="sparse")
    folder = tmp_path / "crafted"
    shutil.copytree(dense_folder, folder)
    witness = tmp_path / "ran"
    write_crafted_pt(folder / "colbert_linear.pt", witness)
    with pytest.raises(CheckpointError, match="colbert_linear.pt: its pickle asks for .*system"):
        Embedder.load(folder, head="colbert")
    assert not witness.exists()
    with pytest.raises(KbertError, match="head 'lexical': expected dense, sparse or colbert"):
        Embedder.load(folder, head="lexical")


def test_head_is_an_embedding_models_option_refused_for_other_tasks(dense_folder, tmp_path):
    from kbert.errors import KbertError
    from kbert.tasks.predictors import PredictionSettings, check_settings

    with pytest.raises(KbertError, match=r"head 'sparse' \(--head\) is an embedding model's option; this is a "
                                         "classify model"):
        check_settings(PredictionSettings(head="sparse"), "classify", "runs/sentiment")
    texts = write(tmp_path, "texts.txt", "\n".join(TEXTS) + "\n")
    run = kbert_in_process("predict", "--model", str(dense_folder), str(texts), "--head", "colbert")
    assert run.returncode != 0 and "colbert_linear.pt: missing" in run.stderr and "Traceback" not in run.stderr


@pytest.fixture(scope="module")
def m3_folder(dense_folder, tmp_path_factory):
    """`dense_folder` with random sparse and ColBERT heads that torch saves (seed 0); the folder and the heads."""
    torch = pytest.importorskip("torch", reason="pip install '.[parity]' (with CPU torch) for the parity tests")
    import shutil

    folder = tmp_path_factory.mktemp("heads") / "bge-m3"
    shutil.copytree(dense_folder, folder)
    torch.manual_seed(0)
    sparse_linear, colbert_linear = torch.nn.Linear(32, 1), torch.nn.Linear(32, 24)
    torch.save(sparse_linear.state_dict(), folder / "sparse_linear.pt")
    torch.save(colbert_linear.state_dict(), folder / "colbert_linear.pt")
    return folder, sparse_linear, colbert_linear


@pytest.mark.parity
def test_bge_m3s_sparse_and_colbert_heads_are_flagembeddings(m3_folder, tmp_path):
    torch = pytest.importorskip("torch", reason="pip install '.[parity]' (with CPU torch) for the parity tests")
    transformers = pytest.importorskip("transformers", reason="pip install '.[parity]'")

    from kbert.errors import KbertError
    from kbert.embeddings.embedder import Embedder

    folder, sparse_linear, colbert_linear = m3_folder
    model = transformers.XLMRobertaModel.from_pretrained(str(folder)).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    special = {tokenizer.cls_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id}
    sparse, colbert = Embedder.load(folder, head="sparse"), Embedder.load(folder, head="colbert")
    terms, vectors = sparse.encode_sparse(TEXTS, batch_size=3), colbert.encode_multi_vector(TEXTS, batch_size=3)
    for text, (indices, values), tokens in zip(TEXTS, terms, vectors):
        features = tokenizer([text], return_tensors="pt")
        with torch.no_grad():
            hidden = model(**features).last_hidden_state[0]
            weights = torch.relu(sparse_linear(hidden)).squeeze(-1).tolist()
            expected_tokens = torch.nn.functional.normalize(colbert_linear(hidden[1:]), dim=-1).numpy()
        expected = {}
        for weight, token in zip(weights, features["input_ids"][0].tolist()):
            if token not in special and weight > 0:
                expected[token] = max(expected.get(token, 0.0), weight)
        assert indices.tolist() == sorted(expected), text
        np.testing.assert_allclose(values, [expected[token] for token in sorted(expected)], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(tokens, expected_tokens, atol=1e-5)
    assert sparse.dimensions == tokenizer.vocab_size and colbert.dimensions == 24
    with pytest.raises(KbertError, match="a bge-m3 head is read beside its folder's dense model"):
        sparse.save(tmp_path / "again")
    texts = write(tmp_path, "texts.txt", "\n".join(TEXTS) + "\n")
    run = kbert_in_process("embed", "--model", str(folder), str(texts), "--head", "sparse", "--top-k", "2")
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert [line["indices"] for line in lines] == [
        sorted(indices[np.argsort(-values, kind="stable")[:2]].tolist()) for indices, values in terms]
    run = kbert_in_process("embed", "--model", str(folder), str(texts), "--head", "colbert")
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(json.loads(run.stdout.splitlines()[2])["embedding"], vectors[2], atol=1e-6)
    from test_serve import post, running_server

    with running_server(folder, "--head", "sparse", "--max-batch", "3") as (url, _):
        status, answer = post(url, {"inputs": TEXTS}, path="/embed_sparse")
        assert status == 200
        assert [[entry["index"] for entry in row] for row in answer] == [indices.tolist() for indices, _ in terms]
        np.testing.assert_allclose([entry["value"] for entry in answer[2]], terms[2][1], rtol=1e-4)
        status, answer = post(url, {"texts": TEXTS[:1]})
        assert status == 200 and answer["predictions"][0]["indices"] == terms[0][0].tolist()
    with running_server(folder, "--head", "colbert") as (url, _):
        status, answer = post(url, {"inputs": TEXTS}, path="/embed_all")
        assert status == 200
        np.testing.assert_allclose(answer[3], vectors[3], atol=1e-5)


@pytest.mark.parity
def test_bge_m3s_heads_run_in_onnxruntime(m3_folder, tmp_path):
    """The sparse head's token weights as an ONNX file (`kbert export --head sparse`), and `kbert embed --runtime
    onnxruntime` and `--quantize int8` on it: pooled into the vocabulary after the model, the Keras model's terms.
    Before, all three were refused ("its ONNX export is not built"). The ColBERT head's file gives Keras's token
    vectors."""
    import onnxruntime

    from kbert.embeddings.bge_m3 import lexical_terms
    from kbert.embeddings.embedder import Embedder

    folder = m3_folder[0]
    sparse = Embedder.load(folder, head="sparse")
    expected = sparse.encode_sparse(TEXTS)
    run = kbert_in_process("export", "--model", str(folder), "--head", "sparse", str(tmp_path / "sparse.onnx"))
    assert run.returncode == 0, run.stderr
    session = onnxruntime.InferenceSession(str(tmp_path / "sparse.onnx"), providers=["CPUExecutionProvider"])
    assert "largest weight of its tokens" in session.get_modelmeta().custom_metadata_map["kbert_input_note"]
    tokenizer = sparse.tokenizer
    special = np.array([token for token in (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
                                            getattr(tokenizer, "unk_id", None)) if token is not None])
    for text, (indices, values) in zip(TEXTS, expected):
        ids = np.array([tokenizer.encode(text)[0]], np.int32)
        weights = session.run(None, {"token_ids": ids, "segment_ids": 0 * ids})[0][0]
        got_indices, got_values = lexical_terms(ids[0].tolist(), weights, special)
        assert got_indices.tolist() == indices.tolist()
        np.testing.assert_allclose(got_values, values, rtol=1e-4, atol=1e-6)
    colbert = Embedder.load(folder, head="colbert")
    run = kbert_in_process("export", "--model", str(folder), "--head", "colbert", str(tmp_path / "colbert.onnx"))
    assert run.returncode == 0, run.stderr
    session = onnxruntime.InferenceSession(str(tmp_path / "colbert.onnx"), providers=["CPUExecutionProvider"])
    ids = np.array([tokenizer.encode(TEXTS[2])[0]], np.int32)
    np.testing.assert_allclose(session.run(None, {"token_ids": ids, "segment_ids": 0 * ids})[0],
                               colbert.model.predict_on_batch([ids, 0 * ids]), atol=1e-5)
    texts = write(tmp_path, "texts.txt", "\n".join(TEXTS) + "\n")
    for options in (["--runtime", "onnxruntime"], ["--quantize", "int8"]):
        run = kbert_in_process("embed", "--model", str(folder), str(texts), "--head", "sparse", *options)
        assert run.returncode == 0, run.stderr
        for line, (indices, values) in zip(run.stdout.splitlines(), expected):
            row = json.loads(line)
            if options[0] == "--runtime":
                assert row["indices"] == indices.tolist()
                np.testing.assert_allclose(row["values"], values, rtol=1e-4, atol=1e-6)
            else:  # int8 weights: the same terms weigh close to the same
                ours, theirs = dict(zip(row["indices"], row["values"])), dict(zip(indices.tolist(), values))
                keys = sorted(set(ours) | set(theirs))
                a, b = (np.array([terms.get(key, 0.0) for key in keys]) for terms in (ours, theirs))
                assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) > 0.95


@pytest.mark.parity
def test_kbert_evaluate_scores_each_head_of_bge_m3(dense_folder, tmp_path, capsys):
    torch = pytest.importorskip("torch", reason="pip install '.[parity]' (with CPU torch) for the parity tests")
    import shutil

    from kbert.embeddings.embedder import Embedder
    from kbert.embeddings.multi_vector import maxsim

    folder = tmp_path / "bge-m3"
    shutil.copytree(dense_folder, folder)
    torch.manual_seed(1)
    torch.save(torch.nn.Linear(32, 1).state_dict(), folder / "sparse_linear.pt")
    torch.save(torch.nn.Linear(32, 24).state_dict(), folder / "colbert_linear.pt")
    corpus = TEXTS + ["A woman is playing violin.", "Two men pushed carts through the woods."]
    for kind in ("sparse", "colbert"):
        (tmp_path / kind).mkdir()
    sparse, _ = evaluated_on_prefixes(folder, tmp_path / "sparse", capsys, corpus, 12, "--head", "sparse")
    colbert, queries = evaluated_on_prefixes(folder, tmp_path / "colbert", capsys, corpus, 12, "--head", "colbert")
    embedder = Embedder.load(folder, head="sparse")
    terms = [dict(zip(*map(np.ndarray.tolist, row))) for row in embedder.encode_sparse(corpus)]
    asked = [dict(zip(*map(np.ndarray.tolist, row))) for row in embedder.encode_sparse(queries)]
    scores = np.array([[sum(weight * document.get(index, 0) for index, weight in query.items()) for document in terms]
                       for query in asked])
    assert sparse["mrr@10"] == pytest.approx(mean_reciprocal_rank(scores)) and sparse["document_terms"] > 0
    embedder = Embedder.load(folder, head="colbert")
    documents = embedder.encode_multi_vector(corpus, "document")
    scores = np.array([maxsim(query, documents) for query in embedder.encode_multi_vector(queries, "query")])
    assert colbert["mrr@10"] == pytest.approx(mean_reciprocal_rank(scores)) and colbert["document_vectors"] > 1
