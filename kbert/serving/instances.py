"""Model instances: how many of a server's batches run at once, and the CPU threads each one gets.

A server's batches are small (16 clients waiting on their answers make batches of about 8 texts),
and the operations of a small batch are too small to keep every core busy: one batch at a time on
a 2-core CPU used 1.55 of the cores. Two batches at once, each on half the cores, keep them all
busy (Triton Inference Server calls these model instances). `kbert serve --instances N` runs N
batches at once and gives each `cores // N` threads where the backend lets kbert set it:
TensorFlow's intra-op pool (before TensorFlow starts running operations), PyTorch's, and
onnxruntime's session. An app made in Python (`kbert.serving.create_app`) around a model loaded
already runs its instances on the threads the backend has. On JAX, and for seq2seq, batches run
one at a time (`serial_reason`).
"""

from __future__ import annotations

import os
from typing import Optional

import keras


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a container's share), else all."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def threads_per_instance(instances: int, cores: Optional[int] = None) -> int:
    """The threads each of `instances` concurrent model calls gets: an equal share of the cores, at least one.

    Example:
    >>> threads_per_instance(2, cores=2), threads_per_instance(2, cores=16), threads_per_instance(3, cores=2)
    (1, 8, 1)
    """
    return max(1, (cores or available_cores()) // instances)


def serial_reason(task: str) -> Optional[str]:
    """Why a model's batches must run one at a time, or None where several may run at once."""
    if task == "seq2seq":
        return "seq2seq's generation was not checked under concurrent calls"
    if keras.backend.backend() == "jax":
        return ("Keras on JAX hands the model's weights to each compiled call to reuse their memory: a second "
                "call at once would find them gone")
    return None


def share_cores(instances: int) -> Optional[int]:
    """Gives each model call `threads_per_instance(instances)` threads on this process's backend; returns the
    count, or None where one instance leaves the backend's pool as it is.

    On TensorFlow this must run before TensorFlow runs its first operation (`kbert serve` calls it before
    the model loads); later, TensorFlow keeps the pool it has (None).
    """
    if instances == 1:
        return None
    return use_threads(threads_per_instance(instances))


def use_threads(threads: int) -> Optional[int]:
    """Gives this process's model calls `threads` threads (TensorFlow's intra-op pool, PyTorch's); returns the
    count, or None where the backend keeps its own (TensorFlow once it has run an operation; JAX)."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
        except RuntimeError:  # TensorFlow has started: its pool is fixed for the process
            return None
    elif keras.backend.backend() == "torch":
        import torch

        torch.set_num_threads(threads)
    else:
        return None
    return threads
