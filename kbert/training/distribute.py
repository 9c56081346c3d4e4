"""Training on several devices or machines: `--strategy` and the model `fit` runs on.

`make_strategy` picks the `tf.distribute` strategy on TensorFlow. On JAX and
PyTorch there is no `tf.distribute`: `auto` trains on one device there, except
that JAX with several devices trains data-parallel
(`keras.distribution.DataParallel`); `mirrored` and `multiworker` are refused
with the reason. `Trainer` is the model
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

import dataclasses
import json
import os
from typing import Optional

import contextlib

import keras

from kbert.errors import KbertError

STRATEGIES = ("auto", "mirrored", "multiworker")


class LocalStrategy:
    """What `fit` needs of a strategy on JAX and PyTorch, where Keras distributes without `tf.distribute`.

    Example:
    >>> strategy = LocalStrategy()
    >>> with strategy.scope():
    ...     strategy.num_replicas_in_sync
    1
    """

    num_replicas_in_sync = 1

    def scope(self):
        return contextlib.nullcontext()


def make_strategy(name: str):
    """The `tf.distribute` strategy for `--strategy` (on JAX and PyTorch, a `LocalStrategy`).

    `auto` mirrors over the local GPUs when there are several and is the
    default (no) strategy otherwise; `multiworker` reads the cluster and this
    process's task from the `TF_CONFIG` environment variable.
    """
    backend = keras.backend.backend()
    if backend != "tensorflow":
        if name == "auto":
            if backend == "jax" and len(keras.distribution.list_devices()) > 1:
                keras.distribution.set_distribution(keras.distribution.DataParallel())
            return LocalStrategy()
        if name in STRATEGIES:
            raise KbertError(f"--strategy {name} is TensorFlow's tf.distribute, and Keras runs on {backend}: "
                             "set KERAS_BACKEND=tensorflow, or use --strategy auto (on JAX, data-parallel "
                             "over all local devices)")
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
    """The role of this process under `MultiWorkerMirroredStrategy`; None otherwise."""
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
    if isinstance(strategy, LocalStrategy):
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
