"""Dynamic batching: the texts of concurrent requests predicted together, one batch at a time.

A model predicts a batch of 32 texts in far less than 32 times the time of
one, so a server that runs each request alone wastes most of the machine
under load. `Batcher` queues requests; its loop takes the oldest, waits up
to `max_wait_ms` for more to arrive while the batch has room for
`max_batch` texts, and runs the batch on a model thread (the predictor
batches by length inside, so a batch pads little). With `instances` > 1,
that many batches run at once, each on its own thread (a small batch
leaves cores idle: `kbert.serving.instances`); while they run, the next
gathers. With `max_batch_tokens`, a batch also stops
gathering before its texts' tokens would pass that budget (Text Embeddings
Inference's `--max-batch-tokens`): a batch of long texts holds fewer of
them, so its time and memory stay bounded. The queue is bounded: a request that would take it
past `max_queue` texts is refused at once (`QueueFull`, HTTP 503) instead
of waiting without end. Requests are tokenized on two threads of the
batcher's own (`prepare`), after the queue is checked and counted against
it meanwhile; a request that times out, or whose client goes, is taken out
of the queue and never run.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import time
from typing import Callable, Deque, List, Optional, Sequence

from kbert.errors import KbertError


class QueueFull(KbertError):
    """The server holds as many waiting texts as it may: try again later."""


@dataclasses.dataclass
class _Request:
    texts: List[str]
    pairs: Optional[List[Optional[str]]]
    future: asyncio.Future
    arrived: float
    tokens: int


class Batcher:
    """Gathers the texts of concurrent requests into batches for `predictor`, run in one thread.

    Args:
        predictor: a `kbert.tasks.predictors.Predictor` (or any callable of
            texts and text pairs giving one row per text).
        max_batch: the most texts a batch gathers (a larger request is one batch of its own).
        max_wait_ms: how long a batch waits for more requests once its first has arrived.
        max_queue: the most texts waiting; a request beyond it raises `QueueFull`.
        timeout_s: the longest a request waits for its rows; then `QueueFull` (HTTP 503).
        max_batch_tokens: the most tokens a batch gathers (None: no budget; a larger request is
            one batch of its own).
        observe: called with each batch's texts and tokens before it runs (the server's metrics).
        instances: batches run at once, each on a thread of its own (the predictor must allow
            concurrent calls; Keras models and onnxruntime sessions do).

    The batch loop is started by `start()` (a server's lifespan), or by the
    first request where nothing started it (an app mounted in another, whose
    lifespan Starlette does not run).

    Example:
    >>> async def main():
    ...     batcher = Batcher(lambda texts, pairs=None: [len(text) for text in texts], max_batch=8,
    ...                       max_wait_ms=1, max_queue=16)
    ...     batcher.start()
    ...     answers = await asyncio.gather(batcher.predict(["ab"]), batcher.predict(["abc", "d"]))
    ...     await batcher.close()
    ...     return answers, batcher.batches
    >>> asyncio.run(main())
    ([[2], [3, 1]], 1)
    """

    def __init__(self, predictor, max_batch: int = 32, max_wait_ms: float = 5.0, max_queue: int = 256,
                 timeout_s: float = 120.0, max_batch_tokens: Optional[int] = None,
                 observe: Optional[Callable[[int, int], None]] = None, instances: int = 1):
        self.predictor, self.max_batch, self.max_wait, self.max_queue = (
            predictor, max_batch, max_wait_ms / 1000, max_queue)
        self.timeout_s, self.max_batch_tokens, self.observe = timeout_s, max_batch_tokens, observe
        self._loop_task: "Optional[asyncio.Task]" = None
        self.queue: Deque[_Request] = collections.deque()
        self.waiting = 0  # texts in the queue
        self.batches = 0  # batches run, for the logs and tests
        self._arrival = asyncio.Event()
        self._closing = False
        self.instances = instances
        self._free_instances = asyncio.Semaphore(instances)
        self._running: "set[asyncio.Task]" = set()
        self._threads = concurrent.futures.ThreadPoolExecutor(max_workers=instances, thread_name_prefix="kbert-model")
        # Requests are tokenized on a pool of their own, counted against the queue while they are: work the
        # server would refuse is refused before it is done, and a flood cannot pile up behind the event loop.
        self.preparing = 0  # texts being tokenized
        self._preparers = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="kbert-tokenize")

    def _check_room(self, texts: int) -> None:
        """`QueueFull` unless `texts` more fit in the queue (an empty queue takes a request of any size)."""
        if self._closing:
            raise QueueFull("the server is shutting down")
        held = self.waiting + self.preparing
        if held and held + texts > self.max_queue:
            raise QueueFull(f"{held} texts are waiting, and {texts} more would pass the server's queue of "
                            f"{self.max_queue} (--max-queue)")

    async def prepare(self, texts: int, function, *args):
        """`function(*args)` (a request's tokenizing) on the tokenizing threads, once the queue has room for its
        `texts` (else `QueueFull` at once, before any work); they count against the queue meanwhile."""
        self._check_room(texts)
        self.preparing += texts
        try:
            return await asyncio.get_running_loop().run_in_executor(self._preparers, function, *args)
        finally:
            self.preparing -= texts

    async def predict(self, texts: Sequence[str], pairs: Optional[Sequence[Optional[str]]] = None,
                      tokens: Optional[int] = None) -> list:
        """The rows of `texts` once their batch has run; `QueueFull` when the queue has no room.
        `tokens`: the request's tokens, for the budget (None: one a text)."""
        self._check_room(len(texts))
        request = _Request(list(texts), None if pairs is None else list(pairs),
                           asyncio.get_running_loop().create_future(), time.perf_counter(),
                           len(texts) if tokens is None else tokens)
        self.queue.append(request)
        self.waiting += len(texts)
        self._arrival.set()
        self.start()
        try:  # shielded: a request already in a running batch is run with it; its rows are dropped
            return await asyncio.wait_for(asyncio.shield(request.future), self.timeout_s)
        except asyncio.TimeoutError:
            self._withdraw(request)
            raise QueueFull(f"no answer within {self.timeout_s:g} s (the server is overloaded); retry later") \
                from None
        except asyncio.CancelledError:  # its client has gone
            self._withdraw(request)
            raise

    def _withdraw(self, request: _Request) -> None:
        """Takes a request nobody waits for out of the queue, unless a batch has it already: its texts are
        never run."""
        request.future.cancel()
        try:
            self.queue.remove(request)
        except ValueError:
            return  # in a batch
        self.waiting -= len(request.texts)

    def start(self) -> "asyncio.Task":
        """Starts the batch loop on the running event loop, unless it runs already; returns its task."""
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.get_running_loop().create_task(self._run())
        return self._loop_task

    async def _run(self) -> None:
        """Runs batches until `close`; every request accepted before it is answered."""
        while True:
            if not self.queue:
                if self._closing:
                    await asyncio.gather(*self._running)
                    return
                self._arrival.clear()
                await self._arrival.wait()
                continue
            await self._free_instances.acquire()  # a batch gathers once an instance is free to run it
            if not self.queue:  # its requests were withdrawn meanwhile (timed out, or their clients went)
                self._free_instances.release()
                continue
            running = asyncio.get_running_loop().create_task(self._run_batch(await self._gather()))
            self._running.add(running)
            running.add_done_callback(self._instance_freed)

    def _instance_freed(self, running: "asyncio.Task") -> None:
        self._running.discard(running)
        self._free_instances.release()

    async def close(self) -> None:
        """Refuses new requests, lets the loop answer the queued ones, and ends it."""
        self._closing = True
        self._arrival.set()
        if self._loop_task is not None:
            await self._loop_task
        self._threads.shutdown(wait=True)
        self._preparers.shutdown(wait=True)

    async def _gather(self) -> List[_Request]:
        """The oldest request and those that arrive within max_wait of it while the batch has room."""
        batch = [self.queue.popleft()]
        size, tokens = len(batch[0].texts), batch[0].tokens
        budget = self.max_batch_tokens or float("inf")
        deadline = batch[0].arrived + self.max_wait
        while size < self.max_batch and tokens < budget:
            if self.queue:
                if size + len(self.queue[0].texts) > self.max_batch or tokens + self.queue[0].tokens > budget:
                    break
                batch.append(self.queue.popleft())
                size, tokens = size + len(batch[-1].texts), tokens + batch[-1].tokens
                continue
            remaining = deadline - time.perf_counter()
            if remaining <= 0 or self._closing:
                break
            self._arrival.clear()
            try:
                await asyncio.wait_for(self._arrival.wait(), remaining)
            except asyncio.TimeoutError:
                break
        self.waiting -= size
        return batch

    async def _run_batch(self, batch: List[_Request], retry: bool = False) -> None:
        """Runs a batch and answers its requests; `retry`: a request of a failed batch run again alone, which
        the batch's count and metrics already hold."""
        texts = [text for request in batch for text in request.texts]
        pairs = None
        if any(request.pairs is not None for request in batch):
            pairs = [pair for request in batch for pair in (request.pairs or [None] * len(request.texts))]
        loop = asyncio.get_running_loop()
        if not retry:
            self.batches += 1
            if self.observe is not None:
                self.observe(len(texts), sum(request.tokens for request in batch))
        try:
            rows = await loop.run_in_executor(self._threads, self.predictor, texts, pairs)
        except Exception as error:
            if len(batch) > 1:  # one bad request fails alone: the others are run again on their own
                for request in batch:
                    if not request.future.done():
                        await self._run_batch([request], retry=True)
            elif not batch[0].future.done():  # its client may have gone
                batch[0].future.set_exception(error)
            return
        start = 0
        for request in batch:
            answer(request.future, rows[start:start + len(request.texts)])
            start += len(request.texts)


def answer(future: asyncio.Future, rows: list) -> None:
    """Sets a request's rows, unless its client has gone (its handler was cancelled)."""
    if not future.done():
        future.set_result(rows)
