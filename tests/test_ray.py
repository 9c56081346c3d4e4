"""`kbert serve --ray` and `kbert embed --ray` on a local Ray cluster, with the real all-MiniLM-L6-v2 and real
reviews: the vectors `kbert embed` gives, the routes `kbert serve` answers, a stopped run finished by --resume, and
what is refused. CI's Ray step runs them (`pip install '.[ray]'`, --require-ray); elsewhere they skip without Ray."""

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request

import numpy as np
import pytest

from conftest import REPO, kbert_in_process, minilm_dir, shared_path
from test_multiworker import free_port

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="Ray is not installed: pip install '.[ray]'")

COUNT = 96


@pytest.fixture(scope="module")
def reviews():
    lines = shared_path("data", "sentiment", "sentiment.test.data").read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines[:COUNT]]


@pytest.fixture(scope="module")
def minilm():
    return minilm_dir()


@pytest.fixture(scope="module")
def embedded(minilm, reviews, tmp_path_factory):
    """What `kbert embed --npy` gives the reviews, in float32."""
    folder = tmp_path_factory.mktemp("plain")
    (folder / "reviews.txt").write_text("\n".join(reviews) + "\n", encoding="utf-8")
    run = kbert_in_process("embed", "--model", minilm, folder / "reviews.txt", "--npy", folder / "v.npy")
    assert run.returncode == 0, run.stderr
    return np.load(folder / "v.npy")


def test_kbert_serve_on_ray_answers_as_kbert_embed_and_stops_on_sigterm(minilm, reviews, embedded):
    """Two Ray Serve replicas (their own local cluster, in the server's process) answer OpenAI's and TEI's routes
    with kbert embed's vectors, each replica its own /metrics; SIGTERM shuts the deployment down, status 0."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "kbert", "serve", str(minilm), "--ray", "--replicas", "2",
                                "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        line = process.stdout.readline()
        assert re.search(rf"on http://127\.0\.0\.1:{port} from 2 Ray Serve replicas", line), \
            (line, process.stderr.read()[-3000:] if process.poll() is not None else "")
        url = f"http://127.0.0.1:{port}"
        for _ in range(4):  # requests spread over the replicas; each answers kbert embed's vectors
            openai = post(url + "/v1/embeddings", {"input": reviews[:3], "model": "m"})
            np.testing.assert_allclose([row["embedding"] for row in openai["data"]], embedded[:3], atol=1e-5)
        tei = post(url + "/embed", {"inputs": reviews[3:5]})
        np.testing.assert_allclose(tei, embedded[3:5], atol=1e-5)
        with urllib.request.urlopen(url + "/metrics", timeout=60) as response:
            metrics = response.read().decode()
        assert 'kbert_model_info{dtype="float32"' in metrics and "kbert_requests_total" in metrics
    finally:
        process.send_signal(signal.SIGTERM)
        status = process.wait(timeout=120)
        process.stdout.close()
        process.stderr.close()
    assert status == 0


def post(url: str, body: dict):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def cluster():
    """One local cluster for the corpus tests (kbert's, with a logical CPU for reading and writing)."""
    from kbert.serving.ray_cluster import start_ray

    start_ray(None, spare_cpus=1)
    yield
    ray.shutdown()


def test_a_jsonl_corpus_on_ray_gets_kbert_embeds_vectors_by_id(minilm, reviews, embedded, tmp_path, cluster):
    """JSON Lines with ids and texts in fields of the user's naming, embedded by 2 actors into Parquet shards:
    every id once, with kbert embed's vector (<= 1e-6)."""
    from kbert.serving.corpus_on_ray import MANIFEST, read_vectors

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"doc": f"r{index}", "body": text}, ensure_ascii=False) + "\n"
                              for index, text in enumerate(reviews)), encoding="utf-8")
    run = kbert_in_process("embed", "--model", minilm, corpus, "--ray", "--output", tmp_path / "out",
                           "--id-field", "doc", "--text-field", "body", "--workers", "2")
    assert run.returncode == 0, run.stderr
    assert f"{COUNT} texts embedded into" in run.stderr
    ids, vectors = read_vectors(str(tmp_path / "out"))
    assert sorted(ids) == sorted(f"r{index}" for index in range(COUNT))
    order = [int(name[1:]) for name in ids]
    np.testing.assert_allclose(vectors, embedded[order], atol=1e-6)
    assert json.loads((tmp_path / "out" / MANIFEST).read_text())["dtype"] == "float32"  # what auto chose


def test_a_stopped_run_resumes_embedding_only_what_no_complete_shard_holds(minilm, reviews, embedded, tmp_path,
                                                                         cluster):
    """A text file's ids are its line numbers. A run that stopped (one shard holding 40 rows, another cut short
    before its footer) finished by --resume: the cut shard removed, the other 56 rows embedded, each id once."""
    import pyarrow.parquet as pq

    from kbert.serving.corpus_on_ray import read_vectors

    corpus, out = tmp_path / "reviews.txt", tmp_path / "out"
    corpus.write_text("\n".join(reviews) + "\n", encoding="utf-8")
    command = ("embed", "--model", minilm, corpus, "--ray", "--output", out)
    assert kbert_in_process(*command).returncode == 0
    (shard,) = out.glob("*.parquet")
    table = pq.read_table(shard)
    assert sorted(table.column("id").to_pylist()) == list(range(1, COUNT + 1))
    shard.unlink()
    pq.write_table(table.slice(0, 40), out / "first.parquet")
    (out / "cut.parquet").write_bytes((out / "first.parquet").read_bytes()[:300])  # no footer

    again = kbert_in_process(*command)
    assert again.returncode != 0 and "already exists" in again.stderr and "--resume" in again.stderr
    resumed = kbert_in_process(*command, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "cut.parquet: an incomplete shard" in resumed.stderr
    assert f"{COUNT - 40} texts embedded into {out} (40 done before)" in resumed.stderr
    ids, vectors = read_vectors(str(out))
    assert sorted(ids) == list(range(1, COUNT + 1))
    np.testing.assert_allclose(vectors, embedded[np.array(ids) - 1], atol=1e-6)

    other = kbert_in_process(*command, "--resume", "--normalize")
    assert other.returncode != 0 and "normalize=False, not normalize=True" in other.stderr


def test_bad_corpora_and_pools_are_refused_by_name(minilm, reviews, tmp_path, cluster):
    """A missing field (naming the fields there), an unknown prompt, a pool that leaves no CPU to read with (none
    of them leaving an output folder behind), a blank text (naming its id, out of Ray's wrapping), and options
    --ray does not take."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    corpus = tmp_path / "corpus.jsonl"
    rows = [{"id": index, "text": text} for index, text in enumerate(reviews[:8])]
    rows[5]["text"] = "   "
    corpus.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")

    def embed(*flags):
        output = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        return kbert_in_process("embed", "--model", minilm, corpus, "--ray", "--output", output, *flags)

    missing = embed("--text-field", "body")
    assert missing.returncode != 0 and "no field 'body' (its rows hold id, text)" in missing.stderr
    pq.write_table(pa.table({"pid": [1, 2], "text": reviews[:2]}), tmp_path / "corpus.parquet")
    parquet = kbert_in_process("embed", "--model", minilm, tmp_path / "corpus.parquet", "--ray", "--output",
                               tmp_path / "from-parquet")
    assert parquet.returncode != 0 and "no field 'id' (its rows hold pid, text)" in parquet.stderr
    prompt = embed("--prompt-name", "query")
    assert prompt.returncode != 0 and "--prompt-name query: " in prompt.stderr and "has no prompts" in prompt.stderr
    crowded = embed("--workers", "3")
    assert crowded.returncode != 0 and "leaving none to read and write" in crowded.stderr
    assert not [path.name for path in tmp_path.iterdir() if path.is_dir()], "a refused run left its output folder"
    blank = embed()
    assert blank.returncode != 0
    assert blank.stderr.strip().splitlines()[-1].endswith(": the text of id 5 is blank (1 in this batch); every "
                                                          "row must hold a text to embed")
    npy = embed("--npy", tmp_path / "v.npy")
    assert npy.returncode != 0 and "--npy is not built for it" in npy.stderr
    alone = kbert_in_process("embed", "--model", minilm, corpus, "--output", tmp_path / "lone")
    assert alone.returncode != 0 and "give --ray [ADDRESS] and --output DIR together" in alone.stderr
