"""The Ray cluster `kbert embed --ray` and `kbert serve --ray` run on: joined, or started on this machine."""

from __future__ import annotations

import os
from typing import Optional

#: What a Ray worker needs of this process's environment: its Keras backend and kbert's own settings.
WORKER_ENV = ("KERAS_BACKEND", "KBERT_DTYPE", "KBERT_CACHE", "TF_CPP_MIN_LOG_LEVEL")


def start_ray(address: Optional[str], spare_cpus: int = 0) -> None:
    """Joins the Ray cluster at `address` ("auto": the one `ray start` made here; "ray://HOST:10001": a remote
    one), or starts a local one (None, and no `RAY_ADDRESS` set) of this machine's cores and `spare_cpus` logical
    CPUs more; either way its workers get this process's `WORKER_ENV`. Nothing where this process has joined one
    already."""
    import ray

    from kbert.serving.instances import available_cores

    if ray.is_initialized():
        return
    # RAY_ADDRESS names a running cluster for ray.init even without an address: it has its CPUs already
    local = {} if address or os.environ.get("RAY_ADDRESS") else {"num_cpus": available_cores() + spare_cpus}
    ray.init(address=address, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {name: os.environ[name] for name in WORKER_ENV if name in os.environ}}, **local)
