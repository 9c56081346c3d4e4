"""`kbert train --strategy multiworker` on two real worker processes on 127.0.0.1.

Each worker is its own `python -m kbert train` with one CPU device, told its
place by TF_CONFIG on TensorFlow and by Keras's KERAS_DISTRIBUTION_* variables
on JAX (the backend of the test run); they train a tiny classifier (dropout
off) for a few steps on a fixed file. The chief's saved weights must equal a single-process run with the
same global batch, and a single-process run with another batch must not (so
the comparison can fail).
"""

import json
import os
import socket
import subprocess
import sys

import keras
import numpy as np
import pytest

from conftest import CONFIGS, finish_together, saved_weights, shared_path

TIMEOUT_S = 240
pytestmark = pytest.mark.skipif(keras.backend.backend() not in ("tensorflow", "jax"),
                                reason="--strategy multiworker is TensorFlow's tf.distribute or JAX's processes")


def cluster_variables(index: int, ports: list) -> dict:
    """The environment that tells worker `index` of `len(ports)` its place, in the backend's own form."""
    if keras.backend.backend() == "jax":
        return {"KERAS_DISTRIBUTION_JOB_ADDRESSES": f"127.0.0.1:{ports[0]}",
                "KERAS_DISTRIBUTION_NUM_PROCESSES": str(len(ports)), "KERAS_DISTRIBUTION_PROCESS_ID": str(index)}
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]



@pytest.fixture(scope="module")
def run_args(tmp_path_factory):
    directory = tmp_path_factory.mktemp("multiworker")
    config = json.loads((CONFIGS / "bert_tiny.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # deterministic steps
    (directory / "config.json").write_text(json.dumps(config))
    lines = shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()
    (directory / "train.data").write_text("\n".join(lines[:48]) + "\n", encoding="utf-8")
    return directory, ["--config", directory / "config.json", "--vocab",
                       shared_path("vocab", "chinese_vocab.txt"), "--train", directory / "train.data",
                       "--valid", directory / "train.data", "--epochs", "2", "--lr", "1e-3",
                       "--maxlen", "32", "--no-shuffle"]


def kbert_train(args, out, batch_size, env=None, wait=True):
    """`kbert train` in a new process: (stdout, stderr, exit status), or the process with `wait=False`."""
    command = [sys.executable, "-m", "kbert", "train", *map(str, args), "--batch-size", str(batch_size),
               "--out", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **(env or {})})
    return process.communicate(timeout=TIMEOUT_S) + (process.returncode,) if wait else process


def processes_together(args, out, batch_size, environments) -> list:
    """`kbert train --strategy multiworker` in a process per environment, all at once: `(exit status, stderr)` of
    each once all have ended (each killed if the time runs out)."""
    runs = [kbert_train(args + ["--strategy", "multiworker"], out, batch_size, wait=False, env=environment)
            for environment in environments]
    try:
        outputs = [run.communicate(timeout=TIMEOUT_S) for run in runs]
    finally:
        for run in runs:
            run.kill()
    return [(run.returncode, stderr) for run, (_, stderr) in zip(runs, outputs)]


@pytest.mark.examples
def test_two_workers_train_exactly_like_one_process_with_the_same_global_batch(run_args):
    directory, args = run_args
    ports = [free_port(), free_port()]
    # All four runs at once: most of each is starting Python and the backend.
    runs = {f"worker {index}": kbert_train(args + ["--strategy", "multiworker"], directory / "multi", 8,
                                           wait=False, env=cluster_variables(index, ports))
            for index in range(2)}
    runs["single"] = kbert_train(args, directory / "single", 8, wait=False)
    runs["half batch"] = kbert_train(args, directory / "half-batch", 4, wait=False)
    outputs = finish_together(runs, TIMEOUT_S)
    role = "process" if keras.backend.backend() == "jax" else "worker"
    assert "saved" in outputs["worker 0"][0]
    assert f"{role} 1 of 2: done; the chief writes the model" in outputs["worker 1"][0]
    assert sorted(path.name for path in directory.iterdir()) == [
        "config.json", "half-batch", "multi", "single", "train.data"]
    state = json.loads((directory / "multi" / "training.json").read_text())
    assert state["worker"] == {"task_type": role, "task_id": 0, "num_workers": 2, "is_chief": True}

    multi, single = saved_weights(directory / "multi"), saved_weights(directory / "single")
    assert sorted(multi) == sorted(single) and len(multi) == 39
    for name in single:
        np.testing.assert_allclose(multi[name], single[name], rtol=1e-5, atol=1e-7, err_msg=name)
    single_state = json.loads((directory / "single" / "training.json").read_text())
    assert [round(epoch["loss"], 5) for epoch in state["history"]] == \
        [round(epoch["loss"], 5) for epoch in single_state["history"]]
    # The comparison can fail: half the global batch trains to other weights.
    other = saved_weights(directory / "half-batch")
    assert any(not np.allclose(other[name], single[name], rtol=1e-5, atol=1e-7) for name in single)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TF_CONFIG is TensorFlow's")
def test_multiworker_refuses_a_bad_tf_config_before_writing(run_args, tmp_path):
    directory, args = run_args
    _, stderr, code = kbert_train(args + ["--strategy", "multiworker"], tmp_path / "out", 8,
                                  env={"TF_CONFIG": '{"cluster": {"worker": ["127.0.0.1:1"]}, '
                                                    '"task": {"type": "worker", "index": 3}}'})
    assert code == 2 and "TF_CONFIG: task worker 3 is not in the cluster (worker: 1)" in stderr
    assert "Traceback" not in stderr and not (tmp_path / "out").exists()


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="Keras's process variables are read on JAX")
@pytest.mark.parametrize("variables, message", [
    ({}, "missing: KERAS_DISTRIBUTION_JOB_ADDRESSES, KERAS_DISTRIBUTION_NUM_PROCESSES, KERAS_DISTRIBUTION_PROCESS_ID"),
    ({"KERAS_DISTRIBUTION_JOB_ADDRESSES": "127.0.0.1:1", "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
      "KERAS_DISTRIBUTION_PROCESS_ID": "2"}, "KERAS_DISTRIBUTION_PROCESS_ID is 2, but processes are numbered 0 to 1"),
    ({"KERAS_DISTRIBUTION_JOB_ADDRESSES": "127.0.0.1", "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
      "KERAS_DISTRIBUTION_PROCESS_ID": "1"}, "expected host:port for the coordinator, got '127.0.0.1'"),
])
def test_jax_processes_refuse_bad_variables_before_writing(run_args, tmp_path, variables, message):
    directory, args = run_args
    clean = {name: "" for name in ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES",
                                   "KERAS_DISTRIBUTION_PROCESS_ID")}
    _, stderr, code = kbert_train(args + ["--strategy", "multiworker"], tmp_path / "out", 8,
                                  env={**clean, **variables})
    assert code == 2 and message in stderr, stderr[-2000:]
    assert "Traceback" not in stderr and not (tmp_path / "out").exists()


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="Keras's process variables are read on JAX")
def test_a_process_without_its_coordinator_stops_with_a_clear_error_in_bounded_time(run_args, tmp_path):
    directory, args = run_args
    variables = {**cluster_variables(1, [free_port(), free_port()]), "KBERT_COORDINATOR_TIMEOUT": "3"}
    _, stderr, code = kbert_train(args + ["--strategy", "multiworker"], tmp_path / "out", 8, env=variables)
    assert code == 2 and "the coordinator (process 0) at 127.0.0.1:" in stderr
    assert "did not answer within 3 s" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="Keras's process variables are read on JAX")
def test_jax_processes_refuse_a_batch_that_does_not_divide_among_them(run_args, tmp_path):
    directory, args = run_args
    ports = [free_port(), free_port()]
    for code, stderr in processes_together(args, tmp_path / "out", 7, [cluster_variables(index, ports)
                                                                          for index in range(2)]):
        assert code == 2 and "--batch-size 7 is the global batch, split evenly among the 2 processes" \
            in stderr, stderr[-2000:]
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="Keras's process variables are read on JAX")
def test_processes_that_disagree_on_their_number_both_stop_and_write_nothing(run_args, tmp_path):
    """Before round 5, a process told NUM_PROCESSES=3 joined a cluster of 2 without a word (JAX takes the count
    from the coordinator): both ended 0 and process 0 saved a model trained on shares that did not add up."""
    directory, args = run_args
    ports = [free_port(), free_port()]
    told = [cluster_variables(0, ports), {**cluster_variables(1, ports), "KERAS_DISTRIBUTION_NUM_PROCESSES": "3"}]
    for code, stderr in processes_together(args, tmp_path / "out", 8, told):
        assert code == 2, stderr[-2000:]
        assert "the 2 processes that joined disagree (process 0: NUM_PROCESSES=2, process 1: NUM_PROCESSES=3)" \
            in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="Keras's process variables are read on JAX")
def test_a_coordinator_address_where_another_service_answers_is_refused_at_once(run_args, tmp_path):
    """Before round 5, JAX retried such an address for minutes, then aborted the process in a C++ check failure."""
    import http.server
    import threading

    directory, args = run_args
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        variables = {"KERAS_DISTRIBUTION_JOB_ADDRESSES": f"127.0.0.1:{server.server_port}",
                     "KERAS_DISTRIBUTION_NUM_PROCESSES": "2", "KERAS_DISTRIBUTION_PROCESS_ID": "1"}
        _, stderr, code = kbert_train(args + ["--strategy", "multiworker"], tmp_path / "out", 8, env=variables)
    finally:
        server.shutdown()
    assert code == 2 and f"something answers at 127.0.0.1:{server.server_port}, but not JAX's coordinator" in stderr
    assert "Traceback" not in stderr and not (tmp_path / "out").exists()
