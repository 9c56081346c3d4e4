"""`kbert serve --ray`: the server as a Ray Serve deployment. Each replica, a Ray actor with its CPUs, loads the
model (`ServedModel`) and runs kbert's own app in it, with its routes, batching, request limits and `/metrics`;
Ray Serve's proxy takes the connections and spreads the requests over the replicas, and Ray restarts a replica that
dies. A replica's `/metrics` counts that replica's requests (Ray's own metrics, `ray_serve_*`, count the whole
deployment: docs/cluster.md).

Example (two replicas on a local Ray cluster):
>>> serve_on_ray(served, "127.0.0.1", 8000, replicas=2)  # doctest: +SKIP
"""

from __future__ import annotations

import signal
import threading
from typing import Callable, Optional

from kbert.serving.served_model import ServedModel

DEPLOYMENT = "kbert"


class Replica:
    """One replica: the model loaded on the actor's CPUs, served by `kbert.serving.create_app`.

    Args:
        served: what to load and how to serve it.
        threads: threads each batch gets (the replica's CPUs shared among its `instances`).
    """

    def __init__(self, served: ServedModel, threads: int):
        from kbert.serving.instances import use_threads

        self.served = served
        use_threads(threads)  # before the model's first operation fixes TensorFlow's pool
        self.predictor = served.load(threads)

    def __serve_build_asgi_app__(self):
        from kbert.serving.app import create_app

        return create_app(self.predictor, self.served.limits)


def serve_on_ray(served: ServedModel, host: str, port: int, replicas: int = 2, replica_cpus: float = 1,
                 address: Optional[str] = None, ready: Callable[[str], None] = print) -> None:
    """Serves `served` from `replicas` Ray Serve replicas of `replica_cpus` CPUs each, on the Ray cluster at
    `address` (None: a local one on this machine; "auto": the running cluster), its proxy at host:port, until
    SIGINT or SIGTERM; `ready(url)` is called once every replica has loaded."""
    from ray import serve

    from kbert.serving.ray_cluster import start_ray

    start_ray(address)
    serve.start(http_options={"host": host, "port": port})
    threads = max(1, int(replica_cpus) // served.limits.instances)
    deployment = serve.deployment(serve.ingress()(Replica), name=DEPLOYMENT, num_replicas=replicas,
                                  ray_actor_options={"num_cpus": replica_cpus},
                                  # the batcher gathers concurrent requests: Ray must let them reach it
                                  max_ongoing_requests=served.limits.max_queue)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        serve.run(deployment.bind(served, threads), name=DEPLOYMENT, route_prefix="/")
        ready(f"http://{f'[{host}]' if ':' in host else host}:{port}")
        stop.wait()
    finally:
        serve.shutdown()
