"""`bert4keras.snippets` on kbert: data helpers, `DataGenerator`, the decoders, and small text utilities.

Example:
>>> from kbert.compat.snippets import text_segmentate, truncate_sequences, longest_common_substring
>>> text_segmentate("今天天气很好。我们去公园吧！好的。", maxlen=8, seps="。！")
['今天天气很好。', '我们去公园吧！', '好的。']
>>> truncate_sequences(5, -1, [1, 2, 3, 4], [5, 6])
[[1, 2, 3], [5, 6]]
>>> longest_common_substring("abcde", "xbcdy")
(3, (1, 4, 1, 4))
"""

from __future__ import annotations

import builtins
import json
import multiprocessing
import os
import types
from typing import Callable, Iterable, Iterator, List, Sequence, Tuple

import numpy as np

from kbert.generation.decoder import AutoRegressiveDecoder
from kbert.layers.crf import ViterbiDecoder
from kbert.serving.app import ServerLimits
from kbert.training import batches
from kbert.training.batches import sequence_padding

__all__ = ["AutoRegressiveDecoder", "DataGenerator", "ViterbiDecoder", "is_string", "longest_common_subsequence",
           "longest_common_substring", "open", "parallel_apply", "parallel_apply_generator", "sequence_padding",
           "strQ2B", "text_segmentate", "to_array", "truncate_sequences", "uniout"]

# bert4keras's `uniout` made Python 2 print Chinese; Python 3 does so already, so importing it does nothing.
uniout = types.ModuleType("uniout", "Python 2's readable printing of unicode; nothing to do on Python 3.")


def to_array(*args):
    """Each argument as a NumPy array; one argument gives one array."""
    arrays = [np.array(arg) for arg in args]
    return arrays[0] if len(arrays) == 1 else arrays


def is_string(value) -> bool:
    return isinstance(value, str)


def strQ2B(text: str) -> str:
    """Full-width characters (ＡＢＣ１２３，the ideographic space) as their half-width forms."""
    return "".join(" " if char == "\u3000" else chr(ord(char) - 0xFEE0) if "\uff01" <= char <= "\uff5e" else char
                   for char in text)


class open:  # noqa: N801 (bert4keras's name, which shadows the built-in as it did there)
    """The built-in `open` with bert4keras's `indexable` option: `f[i]` is line i, `len(f)` the lines.

    Args:
        name, mode, encoding, errors: as the built-in's.
        indexable: False; True to index the lines' offsets when opening; or
            the path of a JSON file holding them (read if it exists, else
            written), for a large file opened again.
    """

    def __init__(self, name, mode: str = "r", encoding=None, errors: str = "strict", indexable=False):
        self.name = name
        self.file = builtins.open(name, mode, encoding=encoding, errors=errors)
        self.offsets = None
        if indexable:
            if isinstance(indexable, str) and os.path.exists(indexable):
                with builtins.open(indexable, encoding="utf-8") as index:
                    self.offsets = json.load(index)
            else:
                self.offsets = self._line_offsets()
                if isinstance(indexable, str):
                    with builtins.open(indexable, "w", encoding="utf-8") as index:
                        json.dump(self.offsets, index)

    def _line_offsets(self) -> List[int]:
        offsets, offset = [], 0
        while self.file.readline():
            offsets.append(offset)
            offset = self.file.tell()
        self.file.seek(0)
        return offsets

    def __getitem__(self, index: int):
        if self.offsets is None:
            raise TypeError(f"{self.name}: open it with indexable=True to read lines by index")
        self.file.seek(self.offsets[index])
        return self.file.readline()

    def __len__(self) -> int:
        if self.offsets is None:
            raise TypeError(f"{self.name}: open it with indexable=True to count its lines")
        return len(self.offsets)

    def __iter__(self):
        return iter(self.file)

    def __next__(self):
        return next(self.file)

    def __getattr__(self, name):  # read, readline, readlines, write, flush, close, tell, seek
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.file.close()


def truncate_sequences(maxlen: int, indices, *sequences) -> List[list]:
    """Pops items (at `indices`, one per sequence or one for all) from the longest sequence until the total
    is at most `maxlen`; empty sequences are dropped first, as in bert4keras. Changes the lists in place."""
    sequences = [sequence for sequence in sequences if sequence]
    if not isinstance(indices, (list, tuple)):
        indices = [indices] * len(sequences)
    while sum(len(sequence) for sequence in sequences) > maxlen:
        longest = int(np.argmax([len(sequence) for sequence in sequences]))
        sequences[longest].pop(indices[longest])
    return sequences


def text_segmentate(text: str, maxlen: int, seps: str = "\n", strips=None) -> List[str]:
    """Splits `text` at the separators `seps` (tried in order) into pieces of at most `maxlen` characters
    where it can; a piece with no separator left stays longer."""
    text = text.strip().strip(strips)
    if not seps or len(text) <= maxlen:
        return [text]
    separator, pieces, current = seps[0], text.split(seps[0]), ""
    segments = []
    for i, piece in enumerate(pieces):
        if current and piece and len(current) + len(piece) > maxlen - 1:
            segments.extend(text_segmentate(current, maxlen, seps[1:], strips))
            current = ""
        current += piece if i + 1 == len(pieces) else piece + separator
    if current:
        segments.extend(text_segmentate(current, maxlen, seps[1:], strips))
    return segments


def longest_common_substring(source: Sequence, target: Sequence) -> Tuple[int, Tuple[int, int, int, int]]:
    """The length of the longest common contiguous run, and its span `(i0, i1, j0, j1)` in each (the first found)."""
    previous, best, span = [0] * (len(target) + 1), 0, (0, 0, 0, 0)
    for i, item in enumerate(source, 1):
        current = [0] * (len(target) + 1)
        for j, other in enumerate(target, 1):
            if item == other:
                current[j] = previous[j - 1] + 1
                if current[j] > best:
                    best, span = current[j], (i - current[j], i, j - current[j], j)
        previous = current
    return best, span


def longest_common_subsequence(source: Sequence, target: Sequence) -> Tuple[int, List[Tuple[int, int]]]:
    """The length of the longest common subsequence, and one such as pairs `(i, j)` of matched positions."""
    table = np.zeros((len(source) + 1, len(target) + 1), dtype=np.int64)
    for i, item in enumerate(source, 1):
        for j, other in enumerate(target, 1):
            table[i, j] = table[i - 1, j - 1] + 1 if item == other else max(table[i, j - 1], table[i - 1, j])
    mapping, i, j = [], len(source), len(target)
    while i > 0 and j > 0:
        if source[i - 1] == target[j - 1]:
            mapping.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif table[i, j - 1] > table[i - 1, j]:
            j -= 1
        else:
            i -= 1
    return int(table[-1, -1]), mapping[::-1]


class DataGenerator(batches.DataGenerator):
    """kbert's `DataGenerator`, whose `to_dataset` also takes bert4keras's arguments.

    bert4keras's `to_dataset(types, shapes, names=None, padded_batch=False)`
    reads a generator whose `__iter__` yields single examples and batches
    them in `tf.data`; with `names`, each example becomes dicts keyed by the
    model's input and output names. Called without `types` it is kbert's
    (`forfit`'s dataset).
    """

    def to_dataset(self, types=None, shapes=None, names=None, padded_batch: bool = False, random: bool = True):
        if types is None:
            return super().to_dataset(random)
        import tensorflow as tf

        def examples():
            for example in self._passes(random):
                yield _named(names, batches._as_tuples(example))

        signature = _named(names, _specs(types, shapes))
        dataset = tf.data.Dataset.from_generator(examples, output_signature=signature)
        dataset = dataset.padded_batch(self.batch_size) if padded_batch else dataset.batch(self.batch_size)
        return dataset.prefetch(tf.data.AUTOTUNE)


def _specs(types, shapes):
    """bert4keras's parallel `types` and `shapes` structures as `tf.TensorSpec`s (a shape is a list, a leaf)."""
    import tensorflow as tf
    if isinstance(types, str):
        return tf.TensorSpec(shapes, types)
    return tuple(_specs(one_type, one_shape) for one_type, one_shape in zip(types, shapes))


def _named(names, values):
    """bert4keras's wrapping of an example by `names`: one name, a tuple of names, or one tuple per part.

    A target part of one name stays bare: Keras 3 takes a single-output
    model's targets as they are, not as a dict keyed by its output's name.
    """
    if names is None:
        return values
    if isinstance(names, str):
        return {names: values}
    if isinstance(names[0], str):
        return dict(zip(names, values))
    return tuple(part[0] if index > 0 and len(part_names) == 1 else dict(zip(part_names, part))
                 for index, (part_names, part) in enumerate(zip(names, values)))


_worker_function: Callable = None  # the function the pool's workers apply (inherited through fork)


def _apply_indexed(item):
    index, value = item
    return index, _worker_function(value)


def _seed_worker(seeds) -> None:
    seed = seeds.get() if not seeds.empty() else None
    np.random.seed(seed)


def parallel_apply_generator(func: Callable, iterable: Iterable, workers: int, max_queue_size: int,
                             dummy: bool = False, random_seeds=True) -> Iterator[Tuple[int, object]]:
    """Applies `func` to each item in `workers` processes (threads with `dummy=True`), yielding
    `(index, result)` pairs as results arrive (not in order).

    Args:
        max_queue_size: how many items are handed to the workers at a time.
        random_seeds: True (each worker seeds NumPy afresh), a list of one
            seed per worker, or False/None (leave NumPy's state).
    """
    global _worker_function
    _worker_function = func
    if dummy:
        from multiprocessing.pool import ThreadPool as pool_class
        seeds = None
    else:
        context = multiprocessing.get_context("fork")  # the workers inherit `func`, closures included
        pool_class = context.Pool
        seeds = context.SimpleQueue()
    if seeds is not None and random_seeds not in (False, None):
        for seed in ([None] * workers if random_seeds is True else random_seeds):
            seeds.put(seed)
    initializer = (_seed_worker, (seeds,)) if seeds is not None and random_seeds not in (False, None) else (None, ())
    with pool_class(workers, *initializer) as pool:
        yield from pool.imap_unordered(_apply_indexed, enumerate(iterable), chunksize=max(1, max_queue_size // workers))


def parallel_apply(func: Callable, iterable: Iterable, workers: int, max_queue_size: int, callback=None,
                   dummy: bool = False, random_seeds=True, unordered: bool = True):
    """`parallel_apply_generator`'s results: a list (in input order with `unordered=False`), or each
    passed to `callback` as it arrives."""
    results = parallel_apply_generator(func, iterable, workers, max_queue_size, dummy, random_seeds)
    if callback is not None:
        for _, result in results:
            callback(result)
        return None
    pairs = list(results) if unordered else sorted(results, key=lambda pair: pair[0])
    return [result for _, result in pairs]


class WebServing:
    """bert4keras's `WebServing`: a function behind an HTTP route, on kbert's server (FastAPI on uvicorn).

    As bert4keras's: `route(path, func, arguments)` reads each argument from
    the query (GET) or the form (POST) as text, converts it with its
    function, and answers JSON `{"code": 0, "desc": "succeeded", "data":
    func(**kwargs)}`; code 1 names a missing required argument, code 2 carries
    the error of a conversion or of `func`. bottle and paste are not needed:
    `server` is accepted and ignored. The model functions run one at a time
    (a lock), as a model in one process should; `start()` serves until
    SIGINT or SIGTERM, answering the requests in flight first, and logs a
    line per request.

    Args:
        host: the address to listen on (bert4keras's default: every interface).
        port: the port (0: any free one).
        server: bert4keras's WSGI server choice; ignored.
        max_body_bytes: the largest POST body read (kbert serve's limit, 1 MB); a larger one is answered
            with code 2 and never read whole.

    Example:
    >>> web = WebServing(host="127.0.0.1", port=0)
    >>> web.route("/gen_synonyms", lambda text, n=1: [text] * n, {"text": (None, True), "n": (int, False)})
    >>> [route.path for route in web.app.routes if route.path == "/gen_synonyms"]
    ['/gen_synonyms']
    """

    def __init__(self, host: str = "0.0.0.0", port: int = 8000, server: str = "paste",
                 max_body_bytes: int = ServerLimits.max_body_bytes):
        try:
            from fastapi import FastAPI
        except ImportError:
            raise ImportError("WebServing runs on FastAPI and uvicorn: pip install 'kbert[serve]'") from None
        import threading

        from kbert.serving.app import RequestLog

        self.host, self.port, self.max_body_bytes = host, port, max_body_bytes
        self.app = FastAPI(title="kbert WebServing")
        self.app.add_middleware(RequestLog)
        self._model_lock = threading.Lock()

    def wraps(self, func: Callable, arguments: dict, method: str = "GET") -> Callable:
        """The route's handler: `func`'s arguments read from the request, its result as bert4keras's JSON."""
        from starlette.concurrency import run_in_threadpool  # the event loop keeps taking requests meanwhile
        from starlette.responses import JSONResponse

        async def handler(request):  # a Starlette route: it receives the request
            outputs = {"code": 0, "desc": "succeeded", "data": {}}
            kwargs = {}
            try:
                given = request.query_params if method == "GET" else _form(await _body(request, self.max_body_bytes))
                for key, (convert, required) in arguments.items():
                    value = given.get(key)
                    if value is None:
                        if required:
                            return JSONResponse({**outputs, "code": 1, "desc": f'lack of "{key}" argument'})
                        continue
                    kwargs[key] = convert(value) if convert is not None else value
                outputs["data"] = await run_in_threadpool(self._call, func, kwargs)
            except Exception as error:  # bert4keras's contract: the error in the answer, the server goes on
                outputs.update(code=2, desc=str(error) or type(error).__name__)
            return JSONResponse(outputs)

        return handler

    def route(self, path: str, func: Callable, arguments: dict, method: str = "GET") -> None:
        """Serves `func` at `path`; `arguments` is `{name: (conversion or None, required)}`."""
        self.app.add_route(path, self.wraps(func, arguments, method), methods=[method])

    def start(self, ready=None) -> None:
        """Serves until SIGINT or SIGTERM; `ready(url)` (default: print it) once it listens."""
        import logging

        from kbert.serving.app import run_app

        if not logging.getLogger().handlers:  # a script's own server: its log line per request, on stderr
            logging.basicConfig(level=logging.INFO, format="kbert: %(message)s")
        run_app(self.app, self.host, self.port, ready or (lambda url: print(f"serving on {url}", flush=True)))

    def _call(self, func: Callable, kwargs: dict):
        with self._model_lock:
            return func(**kwargs)


async def _body(request, most: int) -> bytes:
    """The request's body, read as it streams in and refused past `most` bytes (never held whole)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > most:
        raise ValueError(f"the request body is over this server's limit of {most:,} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > most:
            raise ValueError(f"the request body is over this server's limit of {most:,} bytes")
    return bytes(body)


def _form(body: bytes) -> dict:
    """A POST body's fields: an urlencoded form (what bottle's `request.POST` read), or a JSON object."""
    import urllib.parse

    text = body.decode("utf-8")
    if text.lstrip().startswith("{"):
        return {key: value if isinstance(value, str) else json.dumps(value) for key, value in json.loads(text).items()}
    return dict(urllib.parse.parse_qsl(text, keep_blank_values=True))

