"""A corpus embedded on a Ray cluster (`kbert embed --ray`): Ray Data reads the texts (JSON Lines, Parquet or plain
text), a pool of embedding actors runs them, and the vectors go to Parquet shards beside their ids.

Ray schedules the actors, retries a failed task and restarts a lost actor; kbert adds what makes a long run safe to
stop: the output folder records what decides the vectors (`kbert_embed.json`: the model, prompt, dimensions,
normalisation, dtype, text field), and `resume=True` embeds only the ids that no complete shard holds, after the
same settings are checked, so a folder never mixes vectors of two models. A shard cut short by a crash has no
Parquet footer: it is removed (its rows are embedded again), never read as vectors.

Example (a local cluster on this machine; `address="auto"` joins a running one):
>>> job = CorpusJob(model="all-MiniLM-L6-v2", source="corpus.jsonl", output="vectors")  # doctest: +SKIP
>>> embed_corpus(job, address=None, workers=2)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import sys
from typing import Optional

import numpy as np

from kbert.errors import DataError, KbertError, is_blank
from kbert.serving.ray_cluster import start_ray

MANIFEST = "kbert_embed.json"
#: The fields of `CorpusJob` that decide each vector: a resumed run must have the same.
DECIDING = ("model", "prompt_name", "prompt", "dimensions", "normalize", "dtype", "adapter", "text_field")
ROWS_PER_CALL = 8  # batches of texts an actor's call takes: enough rows for length bucketing to pay
#: What reading, filtering and writing take of a CPU: little, and less than a whole one so that they are scheduled
#: while the embedding actors hold every CPU (else a cluster as small as its actors waits on itself forever).
LIGHT = {"num_cpus": 0.25}


@dataclasses.dataclass(frozen=True)
class CorpusJob:
    """What to embed and where.

    Args:
        model: a sentence-transformers folder (a path every Ray node can read).
        source: a `.jsonl` / `.json` file (JSON Lines), a `.parquet` file or folder of them, or a text file
            (one text a line; its ids are the line numbers, from 1).
        output: the folder of Parquet shards (`id`, `embedding`) and `kbert_embed.json`.
        text_field, id_field: the columns of a JSON Lines or Parquet source.
        batch_size: texts a model call takes.
        prompt_name: the model's prompt put before each text (None: its default one, if any).
        prompt: a prompt's text itself, instead of a named one ("" for none).
        dimensions: keep each vector's first N values (a Matryoshka model).
        normalize: scale each vector to unit length.
        dtype: the weights' dtype (`auto`, `float32`, `bfloat16`), as `Embedder.load` takes it.
        adapter: a task LoRA adapter merged in (jina-embeddings-v3).
    """

    model: str
    source: str
    output: str
    text_field: str = "text"
    id_field: str = "id"
    batch_size: int = 32
    prompt_name: Optional[str] = None
    prompt: Optional[str] = None
    dimensions: Optional[int] = None
    normalize: bool = False
    dtype: str = "auto"
    adapter: Optional[str] = None

    def manifest(self) -> dict:
        return {field: getattr(self, field) for field in DECIDING}


class EmbeddingActor:
    """One Ray actor's embedder: loads the model once, then turns each batch of `id`, `text` rows into `id`,
    `embedding` rows (the same vectors `kbert embed` gives each text)."""

    def __init__(self, job: CorpusJob, threads: int):
        from kbert.embeddings.embedder import Embedder
        from kbert.serving.instances import use_threads

        use_threads(threads)  # before the backend runs its first operation
        self.job = job
        self.embedder = Embedder.load(job.model, adapter=job.adapter, dtype=job.dtype)
        self.prompt = self.embedder.prompt_text(job.prompt_name, job.prompt)

    def __call__(self, batch):
        import pyarrow as pa

        ids, texts = batch.column("id"), batch.column("text").to_pylist()
        blank = [index for index, text in enumerate(texts) if not isinstance(text, str) or is_blank(text)]
        if blank:
            raise DataError(f"{self.job.source}: the text of id {ids[blank[0]].as_py()!r} is "
                            f"{'missing' if texts[blank[0]] is None else 'blank'} ({len(blank)} in this batch); "
                            "every row must hold a text to embed")
        job = self.job
        vectors = self.embedder.truncated(self.embedder.encode(texts, job.batch_size, normalize=job.normalize,
                                                               prompt=self.prompt), job.dimensions, job.normalize)
        broken = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
        if broken.size:
            raise KbertError(f"{job.source}: id {ids[int(broken[0])].as_py()!r} gave NaN or infinite values (an "
                             "overflow in the model's precision, or damaged weights)")
        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).ravel())
        return pa.table({"id": ids, "embedding": pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])})


def embed_corpus(job: CorpusJob, address: Optional[str] = None, workers: int = 2, worker_cpus: float = 1,
                 resume: bool = False, shard_rows: int = 10_000) -> int:
    """Embeds `job.source` into `job.output` on the Ray cluster at `address` (None: a local one on this machine;
    "auto": the running cluster `ray start` made), `workers` actors of `worker_cpus` CPUs each; returns the rows
    embedded by this run. An output folder that exists is refused unless `resume`, and then only with the
    settings it was started with."""
    from ray.data import ActorPoolStrategy

    done = _completed(job, resume)
    start_ray(address, spare_cpus=1)  # a logical CPU for the `LIGHT` tasks of a local cluster
    _check_room(workers, worker_cpus)
    rows = _rows(job, done)
    pending = rows.count()
    if not resume:  # only once the source and the pool are checked: a refused run leaves no folder behind
        _write_manifest(job)
    vectors = rows.map_batches(EmbeddingActor, fn_constructor_args=(job, max(1, int(worker_cpus))),
                               batch_format="pyarrow", batch_size=job.batch_size * ROWS_PER_CALL,
                               compute=ActorPoolStrategy(size=workers), num_cpus=worker_cpus,
                               max_restarts=2, max_task_retries=2)  # Ray restarts a lost actor, retries its task
    try:
        with _input_errors_unlogged():
            if pending:
                vectors.write_parquet(job.output, min_rows_per_file=shard_rows, ray_remote_args=LIGHT)
    except Exception as error:  # Ray wraps an actor's error; kbert's own says what was wrong with the input
        raise _kbert_cause(error) or error
    print(f"kbert: {pending} texts embedded into {job.output} ({len(done)} done before)", file=sys.stderr)
    return pending


def _check_room(workers: int, worker_cpus: float) -> None:
    """Refuses a pool of actors that would hold every CPU of the cluster: its reading and writing tasks would wait
    for a CPU forever."""
    import ray

    cpus = ray.cluster_resources().get("CPU", 0)
    if workers * worker_cpus > cpus - LIGHT["num_cpus"]:
        raise KbertError(f"--workers {workers} of --worker-cpus {worker_cpus:g} need {workers * worker_cpus:g} of the "
                         f"cluster's {cpus:g} CPUs, leaving none to read and write the corpus: give fewer workers")


def read_vectors(output: str):
    """The ids and vectors of an output folder: `(ids, float32 [rows, dimensions])`, in the shards' order."""
    import pyarrow.parquet as pq

    table = pq.read_table([os.path.join(output, name) for name in _shards(output)])
    width = table.schema.field("embedding").type.list_size
    vectors = table.column("embedding").combine_chunks().flatten().to_numpy().reshape(-1, width)
    return table.column("id").to_pylist(), vectors


def _completed(job: CorpusJob, resume: bool) -> set:
    """The ids the output folder holds already: none for a new run (an existing folder refused), those of its
    complete shards for a resumed one (refused where its vectors were made otherwise)."""
    manifest_path = os.path.join(job.output, MANIFEST)
    if not resume:
        if os.path.lexists(job.output):
            raise KbertError(f"{job.output}: already exists; choose a new folder, or --resume to finish the run that "
                             "wrote it (kbert never writes over an earlier output)")
        return set()
    try:
        with open(manifest_path, encoding="utf-8") as handle:
            earlier = json.load(handle)
    except (OSError, ValueError) as error:
        raise KbertError(f"{manifest_path}: cannot read it ({error}); --resume finishes a folder an earlier "
                         "kbert embed --ray wrote") from None
    now = job.manifest()
    changed = [field for field in DECIDING if earlier.get(field) != now[field]]
    if changed:
        then = ", ".join(f"{field}={earlier.get(field)!r}" for field in changed)
        raise KbertError(f"{job.output}: its vectors were made with {then}, not "
                         f"{', '.join(f'{field}={now[field]!r}' for field in changed)}; resume with the same settings, "
                         "or embed into a new folder")
    return _completed_ids(job.output)


def _write_manifest(job: CorpusJob) -> None:
    """A new output folder, with what decides its vectors (`MANIFEST`)."""
    from kbert.io import atomic_path

    os.makedirs(job.output)
    with atomic_path(os.path.join(job.output, MANIFEST)) as temporary, open(temporary, "w", encoding="utf-8") as handle:
        json.dump(job.manifest(), handle, indent=2)


def _completed_ids(output: str) -> set:
    """The ids of every complete shard in `output`; a shard without its Parquet footer (its write was cut short)
    is removed, so that its rows are embedded again."""
    import pyarrow.parquet as pq

    done = set()
    for name in _shards(output):
        path = os.path.join(output, name)
        try:
            done.update(pq.read_table(path, columns=["id"]).column("id").to_pylist())
        except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
            print(f"kbert: {path}: an incomplete shard ({error}); removed, its rows are embedded again",
                  file=sys.stderr)
            os.remove(path)
    return done


def _shards(output: str) -> list:
    return sorted(name for name in os.listdir(output) if name.endswith(".parquet"))


def _rows(job: CorpusJob, done: set):
    """The source as a Ray dataset of `id`, `text` rows, less the ids in `done`."""
    import pyarrow as pa
    import ray

    source = job.source
    if not os.path.exists(source):
        raise KbertError(f"{source}: no such file or folder")
    json_lines = source.endswith((".jsonl", ".json"))
    if json_lines or source.endswith(".parquet") or os.path.isdir(source):
        dataset = (ray.data.read_json(source, lines=True, ray_remote_args=LIGHT) if json_lines
                   else ray.data.read_parquet(source, ray_remote_args=LIGHT))
        fields = dataset.schema().names
        missing = [field for field in (job.id_field, job.text_field) if field not in fields]
        if missing:
            raise DataError(f"{source}: no field {', '.join(map(repr, missing))} (its rows hold {', '.join(fields)});"
                            " name the fields with --id-field and --text-field")
        dataset = dataset.select_columns([job.id_field, job.text_field]).rename_columns(
            {job.id_field: "id", job.text_field: "text"})
    else:
        dataset = ray.data.from_arrow(_text_lines(source))
    if not done:
        return dataset
    return dataset.map_batches(_without, fn_args=(pa.array(list(done)),), batch_format="pyarrow", **LIGHT)


def _without(batch, done_ids):
    """`batch`'s rows whose id is not in `done_ids`."""
    import pyarrow.compute as pc

    return batch.filter(pc.invert(pc.is_in(batch.column("id"), value_set=done_ids)))


def _text_lines(source: str):
    """A text file's lines as `id` (the line number, from 1) and `text` columns."""
    import pyarrow as pa

    try:
        with open(source, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except UnicodeDecodeError as error:
        raise DataError(f"{source}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    return pa.table({"id": pa.array(range(1, len(lines) + 1), pa.int64()), "text": lines})


@contextlib.contextmanager
def _input_errors_unlogged():
    """Ray logs an actor's error with its stack trace as it fails the run; where that error is kbert's refusal of
    the input (raised again here, as the command's one message), its log lines are left out."""
    def not_kbert_refusal(record: logging.LogRecord) -> bool:
        return "kbert.errors." not in record.getMessage()

    handlers = [handler for name in ("ray", "ray.data") for handler in logging.getLogger(name).handlers]
    for handler in handlers:
        handler.addFilter(not_kbert_refusal)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(not_kbert_refusal)


def _kbert_cause(error: BaseException) -> Optional[KbertError]:
    """The `KbertError` an actor raised, out of the exceptions Ray wraps it in (where its chain does not survive
    the trip back to this process, the last such error Ray's message quotes)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, KbertError) and "\n" not in str(error):
            return error
        quoted = re.findall(r"^kbert\.errors\.\w+: (.+)$", str(error), re.MULTILINE)
        if quoted:
            return KbertError(quoted[-1])
        error = getattr(error, "cause", None) or error.__cause__ or error.__context__
    return None
