"""Training on several devices or machines: `--strategy` and the model `fit` runs on.

`make_strategy` picks the `tf.distribute` strategy on TensorFlow. On JAX
there is no `tf.distribute`: `auto` trains data-parallel over the local
devices (`keras.distribution.DataParallel`) when there are several, and
`multiworker` joins the processes Keras's own environment variables name
(`keras.distribution.initialize`'s `KERAS_DISTRIBUTION_JOB_ADDRESSES`,
`_NUM_PROCESSES`, `_PROCESS_ID`; `jax.distributed` underneath, Gloo
collectives on CPUs) and trains data-parallel over every process's devices,
each process feeding its own share of each global batch (`ProcessShare`).
On PyTorch, whose Keras has no multi-process path, `mirrored` and
`multiworker` are refused with the reason. `Trainer` is the model
`kbert.train` compiles and fits: a plain functional `keras.Model` except under
`MultiWorkerMirroredStrategy`, where Keras 3's `fit` fails before the first
step (keras-team/keras#20585) in two places, both fixed here:

- Before training it reduces the whole nested first batch across workers in
  one call, which `tf.distribute` cannot do; only the batch's shapes are needed,
  so the local values are used.
- After each step it reduces every logged metric with `axis=0`, which scalars
  do not have; the steps return them as vectors of one, which reduce to the
  mean over workers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import sys
import time
from typing import Mapping, Optional

import keras
import numpy as np

from kbert.errors import KbertError

STRATEGIES = ("auto", "mirrored", "multiworker")
# Keras's names for a multi-process JAX run (keras.distribution.initialize reads the same).
PROCESS_VARIABLES = ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES",
                     "KERAS_DISTRIBUTION_PROCESS_ID")
# How long a process waits for the coordinator (and the coordinator for the others) before it gives up.
COORDINATOR_TIMEOUT_VARIABLE = "KBERT_COORDINATOR_TIMEOUT"
DEFAULT_COORDINATOR_TIMEOUT_S = 120


class LocalStrategy:
    """What `fit` needs of a strategy on JAX and PyTorch, where Keras distributes without `tf.distribute`.

    Example:
    >>> strategy = LocalStrategy()
    >>> with strategy.scope():
    ...     strategy.num_replicas_in_sync
    1
    """

    def __init__(self, replicas: int = 1):
        self.num_replicas_in_sync = replicas  # the batch's slices: 1, or the batch axis of a model-parallel mesh

    def scope(self):
        return contextlib.nullcontext()


# Megatron's split of a block (kbert's variable paths, every family): the projections into heads and the
# feed-forward's first layer split on their outputs, the layers back to the hidden width on their inputs,
# so each pair needs one reduction; the token table split on the vocabulary. Everything else is replicated.
MODEL_PARALLEL_LAYOUT = {
    r".*MultiHeadSelfAttention/(query|key|value)/kernel": (None, "model"),
    r".*MultiHeadSelfAttention/(query|key|value)/bias": ("model",),
    r".*MultiHeadSelfAttention/output/kernel": ("model", None),
    r".*FeedForward/intermediate[^/]*/kernel": (None, "model"),
    r".*FeedForward/intermediate[^/]*/bias": ("model",),
    r".*FeedForward/output/kernel": ("model", None),
    r"Embedding-Token/embeddings": ("model", None),
}
# The config's sizes that the split divides: each must be a multiple of the model axis.
_SPLIT_SIZES = ("vocab_size", "hidden_size", "intermediate_size")


def model_parallel_distribution(model_parallel: int, config=None) -> "keras.distribution.ModelParallel":
    """A `ModelParallel` distribution over every device: a mesh `(devices / model_parallel, model_parallel)`
    named `("batch", "model")` and `MODEL_PARALLEL_LAYOUT`. A device count or a config size (`config`'s
    vocab_size, hidden_size, heads' width, intermediate_size) that the model axis does not divide is refused.

    Example:
    >>> distribution = model_parallel_distribution(1)
    >>> distribution.device_mesh.axis_names, distribution.device_mesh.shape[1]
    (['batch', 'model'], 1)
    """
    devices = keras.distribution.list_devices()
    if len(devices) % model_parallel:
        raise KbertError(f"--model-parallel {model_parallel} must divide the {len(devices)} devices "
                         f"({', '.join(map(str, devices[:4]))}{', ...' if len(devices) > 4 else ''})")
    sizes = {name: getattr(config, name, None) for name in _SPLIT_SIZES}
    if config is not None and getattr(config, "num_attention_heads", None):
        sizes["num_attention_heads"] = config.num_attention_heads
    for name, size in sizes.items():
        if size is not None and size % model_parallel:
            raise KbertError(f"--model-parallel {model_parallel}: the config's {name} ({size}) does not divide "
                             f"into {model_parallel} equal parts; choose a model axis that divides it")
    mesh = keras.distribution.DeviceMesh((len(devices) // model_parallel, model_parallel), ["batch", "model"],
                                         devices)
    layout = keras.distribution.LayoutMap(mesh)
    for path, axes in MODEL_PARALLEL_LAYOUT.items():
        layout[path] = axes
    return keras.distribution.ModelParallel(layout_map=layout, batch_dim_name="batch")


def make_strategy(name: str, model_parallel: int = 1, config=None):
    """The `tf.distribute` strategy for `--strategy` (on JAX and PyTorch, a `LocalStrategy`).

    `auto` mirrors over the local GPUs when there are several and is the
    default (no) strategy otherwise; `multiworker` reads the cluster and this
    process's task from the `TF_CONFIG` environment variable. `model_parallel`
    over 1 (JAX, `auto`): the model split over that many devices
    (`model_parallel_distribution`), the batch over the rest.
    """
    backend = keras.backend.backend()
    if model_parallel > 1:
        if backend != "jax" or name != "auto":
            raise KbertError(f"--model-parallel runs on JAX (keras.distribution.ModelParallel) with --strategy auto; "
                             f"this run has KERAS_BACKEND={backend} and --strategy {name}")
        distribution = model_parallel_distribution(model_parallel, config)
        keras.distribution.set_distribution(distribution)
        return LocalStrategy(replicas=distribution.device_mesh.shape[0])
    if backend == "jax" and name == "multiworker":
        return join_processes(os.environ)
    if backend != "tensorflow":
        if name == "auto":
            if backend == "jax" and len(keras.distribution.list_devices()) > 1:
                keras.distribution.set_distribution(keras.distribution.DataParallel())
            return LocalStrategy()
        if name in STRATEGIES:
            raise KbertError(f"--strategy {name} has no {backend} implementation in Keras: set KERAS_BACKEND="
                             "tensorflow (tf.distribute) or jax (multiworker: keras.distribution over processes), "
                             "or use --strategy auto (on JAX, data-parallel over all local devices)")
        raise KbertError(f"unknown strategy {name!r}; expected one of {', '.join(STRATEGIES)}")
    import tensorflow as tf

    if name == "auto":
        gpus = tf.config.list_logical_devices("GPU")
        return tf.distribute.MirroredStrategy() if len(gpus) > 1 else tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multiworker":
        _check_keras_hook()
        _check_tf_config(os.environ.get("TF_CONFIG"))
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise KbertError(f"unknown strategy {name!r}; expected one of {', '.join(STRATEGIES)}")


@dataclasses.dataclass(frozen=True)
class JaxProcesses:
    """What `fit` needs of a strategy when JAX trains data-parallel across processes.

    Args:
        process_id: this process's number, 0 (the coordinator, which writes the model) to `num_processes - 1`.
        num_processes: the processes training together.
        num_replicas_in_sync: the devices of all processes, each holding a slice of every global batch.

    Example:
    >>> strategy = JaxProcesses(process_id=1, num_processes=2, num_replicas_in_sync=2)
    >>> with strategy.scope():
    ...     strategy.num_replicas_in_sync
    2
    """

    process_id: int
    num_processes: int
    num_replicas_in_sync: int

    def scope(self):
        return contextlib.nullcontext()


_joined: Optional[JaxProcesses] = None  # jax.distributed is joined once per process


def join_processes(environ: Mapping[str, str]) -> JaxProcesses:
    """Joins the processes that Keras's variables in `environ` name, and distributes data-parallel over all
    their devices (`keras.distribution.DataParallel`). A coordinator that does not answer, or processes that
    do not all come, are an error after `KBERT_COORDINATOR_TIMEOUT` seconds, not a hang."""
    global _joined
    address, count, process = _process_variables(environ)
    if _joined is not None:
        if (_joined.process_id, _joined.num_processes) != (process, count):
            raise KbertError(f"this process already trains as process {_joined.process_id} of "
                             f"{_joined.num_processes}; JAX joins one cluster per process")
        return _joined
    import jax

    timeout = _coordinator_timeout(environ)
    # Collectives between processes on CPUs (a GPU's go through NCCL); set before JAX starts its CPU client.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if process != 0:
        _wait_for(address, timeout)
    try:
        jax.distributed.initialize(coordinator_address=address, num_processes=count, process_id=process,
                                   initialization_timeout=timeout)
    except Exception as error:  # jaxlib raises its own XlaRuntimeError (deadline exceeded, refused)
        raise KbertError(f"process {process} of {count} could not join the cluster at {address} within "
                         f"{timeout} s ({type(error).__name__}: {str(error).splitlines()[0][:300]}): start "
                         f"every process with the same KERAS_DISTRIBUTION_JOB_ADDRESSES and NUM_PROCESSES "
                         f"and its own PROCESS_ID") from None
    _roll_call(count, process)
    devices = keras.distribution.list_devices()
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False))
    _joined = JaxProcesses(process_id=process, num_processes=count, num_replicas_in_sync=len(devices))
    return _joined


def _roll_call(count: int, process: int) -> None:
    """Checks that every process that joined was started with the same KERAS_DISTRIBUTION_NUM_PROCESSES and its
    own PROCESS_ID. JAX takes the count from the coordinator, so a process told another count joins without a
    word, and would train on a share of the batch the others do not expect; each process gathers the others'
    variables (a collective all of them reach, so none is left waiting) and refuses any disagreement."""
    import jax
    from jax.experimental import multihost_utils

    try:
        told = np.asarray(multihost_utils.process_allgather(np.array([count, process], np.int32)))
    except Exception as error:  # jaxlib's own runtime errors (a process that went away)
        raise KbertError(f"process {process}: the processes could not compare their variables "
                         f"({type(error).__name__}: {str(error).splitlines()[0][:200]})") from None
    told = told.reshape(-1, 2)
    if jax.process_count() != count or any(int(other) != count for other in told[:, 0]) \
            or sorted(told[:, 1].tolist()) != list(range(len(told))):
        described = ", ".join(f"process {int(index)}: NUM_PROCESSES={int(number)}" for number, index in told)
        raise KbertError(f"the {jax.process_count()} processes that joined disagree ({described}): start every "
                         "process with the same KERAS_DISTRIBUTION_NUM_PROCESSES, the number of processes, and each "
                         "with its own KERAS_DISTRIBUTION_PROCESS_ID")


def _process_variables(environ: Mapping[str, str]) -> tuple:
    """(coordinator address, number of processes, this process's id) from Keras's variables, checked."""
    missing = [name for name in PROCESS_VARIABLES if not environ.get(name)]
    if missing:
        raise KbertError("--strategy multiworker on JAX reads Keras's variables KERAS_DISTRIBUTION_JOB_ADDRESSES "
                         "(the coordinator's host:port, process 0's, or every process's, comma-separated), "
                         "KERAS_DISTRIBUTION_NUM_PROCESSES and KERAS_DISTRIBUTION_PROCESS_ID; missing: "
                         + ", ".join(missing))
    addresses = [part.strip() for part in environ["KERAS_DISTRIBUTION_JOB_ADDRESSES"].split(",")]
    try:
        count, process = (int(environ[name]) for name in PROCESS_VARIABLES[1:])
    except ValueError:
        raise KbertError(f"KERAS_DISTRIBUTION_NUM_PROCESSES and KERAS_DISTRIBUTION_PROCESS_ID must be whole "
                         f"numbers, got {environ['KERAS_DISTRIBUTION_NUM_PROCESSES']!r} and "
                         f"{environ['KERAS_DISTRIBUTION_PROCESS_ID']!r}") from None
    if count < 1 or not 0 <= process < count:
        raise KbertError(f"KERAS_DISTRIBUTION_PROCESS_ID is {process}, but processes are numbered 0 to "
                         f"{count - 1} (KERAS_DISTRIBUTION_NUM_PROCESSES={count})")
    if len(addresses) > 1 and len(addresses) != count:
        raise KbertError(f"KERAS_DISTRIBUTION_JOB_ADDRESSES names {len(addresses)} processes but "
                         f"KERAS_DISTRIBUTION_NUM_PROCESSES is {count}: name every process, or the coordinator "
                         "(process 0) alone")
    host, _, port = addresses[0].rpartition(":")
    if not host or not port.isdigit():
        raise KbertError(f"KERAS_DISTRIBUTION_JOB_ADDRESSES: expected host:port for the coordinator, got "
                         f"{addresses[0]!r}")
    return addresses[0], count, process


def _coordinator_timeout(environ: Mapping[str, str]) -> int:
    text = environ.get(COORDINATOR_TIMEOUT_VARIABLE, str(DEFAULT_COORDINATOR_TIMEOUT_S))
    if not text.isdigit() or int(text) < 1:
        raise KbertError(f"{COORDINATOR_TIMEOUT_VARIABLE} must be a whole number of seconds, got {text!r}")
    return int(text)


def _wait_for(address: str, timeout: int) -> None:
    """Returns once the coordinator at `address` accepts connections; a clear error after `timeout` seconds."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=5) as connection:
                _check_grpc(connection, address)
                return
        except OSError as error:
            if time.monotonic() > deadline:
                raise KbertError(f"the coordinator (process 0) at {address} did not answer within {timeout} s "
                                 f"({error}): start process 0 first, check the address and that the port is "
                                 f"open, or wait longer ({COORDINATOR_TIMEOUT_VARIABLE})") from None
            time.sleep(0.5)


# HTTP/2's connection preface and an empty SETTINGS frame: a gRPC server (JAX's coordinator is one) answers with
# its own SETTINGS frame (type 4, the fourth byte of a frame's header)
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _check_grpc(connection: socket.socket, address: str) -> None:
    """Refuses a coordinator address where something answers that is not a gRPC server (another service on the
    port): JAX would retry it for minutes, then end the process in a C++ check failure."""
    try:
        connection.sendall(_HTTP2_PREFACE)
        connection.settimeout(10)
        head = b""
        while len(head) < 9:
            chunk = connection.recv(9 - len(head))
            if not chunk:
                break
            head += chunk
    except OSError:
        head = b""
    if len(head) < 9 or head[3] != 4:
        raise KbertError(f"something answers at {address}, but not JAX's coordinator (it does not speak gRPC: "
                         f"{head[:24]!r}): KERAS_DISTRIBUTION_JOB_ADDRESSES must name process 0's host and a free "
                         "port on it, where process 0 runs") from None


class ProcessShare(keras.utils.PyDataset):
    """This process's share of each global batch of `batches`, when several processes train together.

    Process `process_id` of `num_processes` gets rows `[i * m / n, (i + 1) * m / n)` of each batch of `m`
    rows, so the processes' shares make up the batch one process would train on: the same steps, the same
    weights. A batch whose rows do not divide among the processes loses its last `m mod n` rows (every
    process the same ones; process 0 says so), as each device must hold an equal slice of the global batch.

    Example:
    >>> batches = [((np.arange(8).reshape(4, 2),), np.arange(4))]
    >>> (tokens,), labels = ProcessShare(batches, process_id=1, num_processes=2)[0]
    >>> tokens.tolist(), labels.tolist()
    ([[4, 5], [6, 7]], [2, 3])
    """

    def __init__(self, batches, process_id: int, num_processes: int):
        super().__init__()
        self.batches, self.process_id, self.num_processes = batches, process_id, num_processes
        self.cut = set()  # the batches that lost rows, said once each

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int):
        batch = self.batches[index]
        total = len(keras.tree.flatten(batch)[0])
        rows = total // self.num_processes
        if total % self.num_processes and index not in self.cut:
            self.cut.add(index)  # said once a batch, by process 0 alone: every process cuts the same rows
            if self.process_id == 0:
                print(f"kbert: batch {index + 1} of {len(self)} has {total} rows, which do not divide among "
                      f"{self.num_processes} processes: its last {total % self.num_processes} left out",
                      file=sys.stderr)
        return keras.tree.map_structure(
            lambda array: np.asarray(array)[self.process_id * rows:(self.process_id + 1) * rows], batch)

    def on_epoch_begin(self) -> None:
        getattr(self.batches, "on_epoch_begin", lambda: None)()

    def on_epoch_end(self) -> None:
        getattr(self.batches, "on_epoch_end", lambda: None)()


def _check_keras_hook() -> None:
    """`Trainer` overrides Keras's `_maybe_symbolic_build` (internal) for several workers: fail clearly
    on a Keras without it, rather than train wrongly."""
    if not hasattr(keras.Model, "_maybe_symbolic_build"):
        raise KbertError(f"--strategy multiworker relies on Keras's Model._maybe_symbolic_build, which Keras "
                         f"{keras.__version__} lacks: install the Keras kbert is tested with "
                         "(pip install 'keras==3.15.*')")


def _check_tf_config(text: Optional[str]) -> None:
    """Says what is wrong with TF_CONFIG, where TensorFlow would fail or hang on it."""
    if not text:
        raise KbertError("--strategy multiworker needs the TF_CONFIG environment variable "
                         '(the cluster and this worker\'s task), e.g. {"cluster": {"worker": '
                         '["host1:12345", "host2:12345"]}, "task": {"type": "worker", "index": 0}}')
    try:
        config = json.loads(text)
        workers = config["cluster"]["worker"]
        task_type, index = config["task"]["type"], config["task"]["index"]
    except (ValueError, KeyError, TypeError) as error:
        raise KbertError(f"TF_CONFIG: expected JSON with cluster.worker (a list of host:port) and "
                         f"task.type / task.index ({type(error).__name__}: {error})") from None
    members = len(config["cluster"].get(task_type, []))  # cluster["worker"] above: it is a dict
    if not isinstance(workers, list) or not isinstance(index, int) or not 0 <= index < members:
        raise KbertError(f"TF_CONFIG: task {task_type} {index} is not in the cluster "
                         f"({', '.join(f'{k}: {len(v)}' for k, v in config['cluster'].items())})")


@dataclasses.dataclass(frozen=True)
class WorkerRole:
    """This process's place in a multi-worker cluster; only the chief writes the model."""

    task_type: str
    task_id: int
    num_workers: int
    is_chief: bool


def worker_role(strategy) -> Optional[WorkerRole]:
    """The role of this process under `MultiWorkerMirroredStrategy` or JAX's processes; None otherwise."""
    if isinstance(strategy, JaxProcesses):
        return WorkerRole("process", strategy.process_id, strategy.num_processes, strategy.process_id == 0)
    if not is_multi_worker(strategy):
        return None
    resolver = strategy.cluster_resolver
    jobs = resolver.cluster_spec().as_dict()
    # The chief is the "chief" task, or worker 0 when the cluster names none.
    chief = resolver.task_type == "chief" or (
        "chief" not in jobs and resolver.task_type == "worker" and resolver.task_id == 0)
    return WorkerRole(resolver.task_type, int(resolver.task_id),
                      len(jobs.get("chief", [])) + len(jobs.get("worker", [])), chief)


def is_multi_worker(strategy) -> bool:
    """Under `tf.distribute.MultiWorkerMirroredStrategy` (JAX's processes are `JaxProcesses`)."""
    if isinstance(strategy, (LocalStrategy, JaxProcesses)):
        return False
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


class Trainer(keras.Model):
    """The functional model `kbert.train` fits, working under every `--strategy`.

    Built as a functional model (`Trainer(inputs, outputs)`); it holds the
    optimizer, so the task's model (which shares its layers) saves weights
    only. See the module docstring for what it changes under multiple workers.

    Example:

    >>> import keras
    >>> inputs = keras.Input((3,))
    >>> trainer = Trainer(inputs, keras.layers.Dense(2)(inputs), name="trainer")
    >>> trainer.compile(optimizer="sgd", loss="mse")
    >>> sorted(trainer.train_on_batch(keras.ops.ones((4, 3)), keras.ops.ones((4, 2)), return_dict=True))
    ['loss']
    """

    if keras.backend.backend() == "tensorflow":  # the multi-worker fixes; other backends' steps differ
        def _maybe_symbolic_build(self, iterator=None, data_batch=None):
            strategy = self.distribute_strategy
            if iterator is not None and is_multi_worker(strategy):
                for _, _, batches in iterator:
                    data_batch = keras.tree.map_structure(
                        lambda value: strategy.experimental_local_results(value)[0], next(batches))
                    break
                iterator = None
            super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

        def train_step(self, data):
            return self._reducible(super().train_step(data))

        def test_step(self, data):
            return self._reducible(super().test_step(data))

        def _reducible(self, logs: dict) -> dict:
            if not is_multi_worker(self.distribute_strategy):
                return logs
            return {name: keras.ops.reshape(value, [1]) for name, value in logs.items()}
