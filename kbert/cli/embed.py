"""`kbert embed`: a vector per input text from a sentence-transformers model, as JSON Lines or `.npy`; a sparse
encoder's weights, a multi-vector encoder's token vectors; int8 and binary precisions, calibration."""

from __future__ import annotations

import json
import logging
import os
import sys

from kbert.cli.arguments import (calibrated_on_input, embedding_head_argument, exported_runtime, positive_float,
                                 positive_int, precision_option, ray_address, ray_option, runtime_options)
from kbert.cli.inputs import input_lines
from kbert.errors import DataError, KbertError, first_line, is_blank


def add_commands(command) -> None:
    """Adds `embed` through `command(name, help)`, which returns a sub-parser."""
    embed = command("embed", "a vector per input text from a sentence-transformers model (a folder or a name "
                             "such as hf://sentence-transformers/all-MiniLM-L6-v2): JSON Lines, or --npy; a "
                             "SparseEncoder's as {\"indices\", \"values\"} lines; a MultiVectorEncoder's "
                             "(ColBERT) as a vector per token")
    embed.add_argument("--model", required=True, help="a sentence-transformers folder, or a name (hf://OWNER/NAME, "
                                                       "an archive's URL) fetched once into the cache")
    embed.add_argument("input", nargs="?", default="-", help="file of texts, one a line; - for standard input")
    embed.add_argument("--npy", metavar="OUT", help="write one float32 array [texts, dimensions] to OUT (.npy) "
                                                    "instead of printing; OUT must not exist (a multi-vector "
                                                    "model: every token's vectors [tokens, dimensions], and OUT's "
                                                    "name with .offsets.npy, where each text's rows start)")
    embed.add_argument("--batch-size", type=positive_int, default=32, help="texts a model call takes at most")
    embed.add_argument("--normalize", action="store_true",
                       help="scale each vector to unit length (a model whose last module is Normalize does)")
    prompt = embed.add_mutually_exclusive_group()
    prompt.add_argument("--prompt-name", metavar="NAME", help="put the model's prompt NAME before each text (the "
                                                              "prompts of its config_sentence_transformers.json; "
                                                              "default: its default_prompt_name, if any); a "
                                                              "multi-vector model: query or document embeds the "
                                                              "texts as queries (expanded) or documents")
    prompt.add_argument("--prompt", metavar="TEXT", help="put TEXT before each text instead ('' for no prompt)")
    embed.add_argument("--dimensions", type=positive_int, metavar="N",
                       help="keep each vector's first N values (a Matryoshka model's shorter vectors), scaled back "
                            "to unit length where the model's vectors are")
    embed.add_argument("--precision", choices=("float", "int8", "uint8", "binary", "ubinary"), default="float",
                       help="the vectors' values: float32, or fewer bits as sentence-transformers' "
                            "quantize_embeddings gives them (int8 and uint8 need --ranges, or the "
                            "model folder's calibration_ranges.json)")
    embed.add_argument("--ranges", metavar="FILE", help="each dimension's calibration range, for --precision int8 "
                                                        "or uint8 (a file --calibrate wrote)")
    embed.add_argument("--calibrate", metavar="OUT", help="write each dimension's range over the input texts' "
                                                          "vectors to OUT (JSON) instead of the vectors")
    embed.add_argument("--top-k", type=positive_int, metavar="K",
                       help="a sparse encoder: keep each vector's K largest weights (sentence-transformers' "
                            "max_active_dims); default: every non-zero one")
    embedding_head_argument(embed)
    embed.add_argument("--adapter", metavar="TASK", help="a model with task LoRA adapters (jina-embeddings-v3): "
                                                         "the task's, merged in (retrieval.query, retrieval.passage, "
                                                         "separation, classification, text-matching), with the "
                                                         "folder's prompt of that name if it has one; default: "
                                                         "none, the base weights")
    embed.add_argument("--cache-dir", help="where a named model is kept (default: $KBERT_CACHE, else "
                                           "~/.cache/kbert; the hub's own cache for hf://)")
    runtime_options(embed, "the model", "worth it for a long file on a CPU: the export takes seconds "
                    "(docs/embeddings.md)", auto=True)
    precision_option(embed, weights=True)
    ray_option(embed, "embed a corpus (a .jsonl, .parquet or text file, or a folder of .parquet) into --output's "
                      "Parquet shards of ids and vectors")
    corpus = embed.add_argument_group("a corpus on Ray (--ray)")
    corpus.add_argument("--output", metavar="DIR", help="the folder of Parquet shards (id, embedding); it must not "
                                                        "exist, unless --resume")
    corpus.add_argument("--resume", action="store_true", help="finish the run that wrote --output: embed only the ids "
                                                              "no complete shard holds, with the same settings")
    corpus.add_argument("--text-field", default="text", help="the texts' field in JSON Lines or Parquet rows")
    corpus.add_argument("--id-field", default="id", help="the ids' field in JSON Lines or Parquet rows (a text "
                                                         "file's ids are its line numbers, from 1)")
    corpus.add_argument("--workers", type=positive_int, default=2, help="embedding actors (each loads the model)")
    corpus.add_argument("--worker-cpus", type=positive_float, default=1, help="CPUs each actor takes (its threads)")
    embed.set_defaults(run=run_embed)


def run_embed(args) -> int:
    """`kbert embed`: one `{"embedding": [...]}` line per input line, or one `.npy` array."""
    import numpy as np

    from kbert.io import atomic_path
    from kbert.embeddings.embedder import Embedder
    from kbert.embeddings.precision import (CALIBRATED, RANGES_FILE, calibration_ranges, load_ranges, quantized,
                                            save_ranges)

    if args.ray or args.output or args.resume:
        return _embed_on_ray(args)
    for path in (args.npy, args.npy and offsets_path(args.npy)):
        if path and os.path.lexists(path):
            raise KbertError(f"{path}: already exists; choose a new path (kbert never writes over an earlier output)")
    _check_precision_options(args)
    runtime = exported_runtime(args)  # its options checked, --calibration read, before the model loads
    folder = Embedder.folder(args.model, args.cache_dir)  # before waiting for standard input
    if args.precision in CALIBRATED and not args.ranges and not os.path.isfile(os.path.join(folder, RANGES_FILE)):
        raise KbertError(f"--precision {args.precision} needs each dimension's range: --ranges FILE, or "
                         f"{RANGES_FILE} in {folder}; kbert embed --calibrate OUT.json writes them from texts like "
                         "yours")
    texts = input_lines(args.input)
    blank = [number for number, text in enumerate(texts, 1) if is_blank(text)]
    if blank:
        raise DataError(f"{args.input}: line {blank[0]} is blank, or invisible characters only ({len(blank)} blank "
                        "lines in all); every line must "
                        "hold a text to embed, so that the vectors line up with the lines")
    runtime = calibrated_on_input(runtime, texts)  # OpenVINO's int8 without --calibration: on these texts
    embedder = Embedder.load(folder, adapter=args.adapter, head=args.head)
    _check_kind_options(args, embedder)
    if not embedder.output.calibrated:  # sparse or multi-vector: no precision, ranges or dimensions
        return _embed_by_role(args, embedder, texts, runtime)
    # an unknown name is refused before an export; the prompt goes to encode, which counts its tokens where the
    # pooling leaves them out
    prompt = embedder.prompt_text(args.prompt_name, args.prompt)
    embedder.check_dimensions(args.dimensions)
    ranges = load_ranges(args.ranges, args.dimensions or embedder.dimensions) if args.ranges else embedder.ranges
    if args.precision in CALIBRATED and not args.ranges and args.dimensions not in (None, embedder.dimensions):
        raise KbertError(f"{os.path.join(folder, RANGES_FILE)}: ranges of all {embedder.dimensions} dimensions; "
                         f"--dimensions {args.dimensions} vectors are scaled anew, so they need ranges of their own "
                         f"(kbert embed --dimensions {args.dimensions} --calibrate OUT.json, then --ranges OUT.json)")
    if runtime:
        _run_through(runtime, embedder, args)
    vectors = embedder.truncated(embedder.encode(texts, args.batch_size, normalize=args.normalize, prompt=prompt),
                                 args.dimensions, args.normalize)
    broken = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if broken.size:  # JSON has no NaN, and a NaN in a .npy poisons every search over it
        raise KbertError(f"{args.input}: line {broken[0] + 1} ({broken.size} lines in all) gave NaN or infinite "
                         "values (an overflow in the model's precision, or damaged weights); nothing was written")
    if args.calibrate:
        save_ranges(args.calibrate, calibration_ranges(vectors), args.model, len(texts))
        print(f"kbert: the ranges of {vectors.shape[1]} dimensions over {len(texts)} texts written to "
              f"{args.calibrate}", file=sys.stderr)
        return 0
    vectors = quantized(vectors, args.precision, ranges)
    if args.npy:
        with atomic_path(args.npy) as temporary:
            with open(temporary, "wb") as handle:
                np.save(handle, vectors)
        print(f"kbert: {len(texts)} vectors of {vectors.shape[1]} dimensions written to {args.npy}", file=sys.stderr)
        return 0
    for vector in vectors:
        print(json.dumps({"embedding": vector.tolist()}))
    return 0


def _embed_on_ray(args) -> int:
    """`kbert embed --ray --output DIR CORPUS`: dense vectors of a corpus, written as Parquet shards by a pool of
    embedding actors on a Ray cluster (`kbert.serving.corpus_on_ray`)."""
    if not (args.ray and args.output):
        raise KbertError("--output and --resume embed a corpus on Ray: give --ray [ADDRESS] and --output DIR together")
    if args.input == "-":
        raise KbertError("--ray reads a corpus from a file or folder every Ray node can read, not standard input")
    other = [option for option, given in (
        ("--npy", args.npy), ("--calibrate", args.calibrate), ("--ranges", args.ranges),
        ("--precision", args.precision != "float"), ("--top-k", args.top_k), ("--head", args.head),
        ("--runtime", args.runtime != "keras"), ("--quantize", args.quantize), ("--calibration", args.calibration),
        ("--mixed-precision", args.mixed_precision)) if given]
    if other:
        raise KbertError(f"--ray writes each text's float vector to Parquet shards; {', '.join(other)} "
                         "is not built for it: embed without --ray for that")
    from kbert.embeddings.embedder import Embedder
    from kbert.embeddings.folders import read_sentence_transformer
    from kbert.serving.corpus_on_ray import CorpusJob, embed_corpus

    address = ray_address(args)
    folder = Embedder.folder(args.model, args.cache_dir)  # a name fetched here, once, not by each worker
    prompts = read_sentence_transformer(folder).prompts
    if args.prompt_name is not None and args.prompt_name not in prompts:  # refused before the actors start
        raise KbertError(f"--prompt-name {args.prompt_name}: {args.model} has "
                         f"{'the prompts ' + ', '.join(prompts) if prompts else 'no prompts'}")
    job = CorpusJob(model=os.path.abspath(folder), source=args.input, output=args.output,
                    text_field=args.text_field, id_field=args.id_field, batch_size=args.batch_size,
                    prompt_name=args.prompt_name, prompt=args.prompt, dimensions=args.dimensions,
                    normalize=args.normalize, dtype=args.dtype, adapter=args.adapter)
    embed_corpus(job, address, workers=args.workers, worker_cpus=args.worker_cpus, resume=args.resume)
    return 0


# --runtime auto leaves a model with more float32 weights than this (67 M parameters) on Keras: tf2onnx's conversion
# peaked at 2.42 GB of memory for MiniLM's 90 MB and at 9.56 GB for a BERT-base-shaped model's 440 MB
# (benchmarks.export_memory, docs/embeddings.md), more than a default should risk on a first run
AUTO_EXPORT_BYTES = 256 << 20


def _run_through(runtime, embedder, args) -> None:
    """Puts the ONNX export `runtime` runs in place of the embedder's Keras model. Where `--runtime auto` chose it,
    Keras stays for a model over `AUTO_EXPORT_BYTES`, or one whose export is refused (a check it fails), with a
    warning; a runtime asked for by name is refused then."""
    from kbert.serving.runtimes import onnx_embedder

    auto = getattr(args, "runtime_auto", False)
    size = embedder.model.count_params() * 4 if auto else 0
    if size > AUTO_EXPORT_BYTES:
        logging.getLogger("kbert").info("runtime: keras after all (auto: %d MiB of float32 weights, over the %d MiB "
                                        "an automatic export takes on)", size >> 20, AUTO_EXPORT_BYTES >> 20)
        return
    try:
        embedder.model = onnx_embedder(embedder, runtime)
    except KbertError as error:
        if not auto:
            raise
        logging.getLogger("kbert").warning("runtime: keras after all (auto: %s)", first_line(str(error)))


def offsets_path(npy: str) -> str:
    """Where `kbert embed --npy OUT` of a multi-vector model writes where each text's rows start."""
    return (npy[:-len(".npy")] if npy.endswith(".npy") else npy) + ".offsets.npy"


def _embed_by_role(args, embedder, texts, runtime) -> int:
    """`kbert embed` of a sparse or multi-vector encoder, `--prompt-name query` or `document` the texts' role (which
    picks its prompt, and an inference-free encoder's side): a sparse encoder's `{"indices", "values"}` lines, a
    multi-vector encoder's token vectors (`_write_token_vectors`)."""
    role = args.prompt_name if args.prompt_name in ("query", "document") else None
    prompt_name, prompt = None if role else args.prompt_name, args.prompt
    if embedder.output.one_vector:  # a sparse encoder's prompt: an unknown name is refused before an export
        texts, prompt_name, prompt = embedder.role_prompted(texts, role, prompt_name, prompt), None, ""
    if runtime:
        _run_through(runtime, embedder, args)
    if not embedder.output.one_vector:
        return _write_token_vectors(args, embedder.encode_multi_vector(
            texts, role, args.batch_size, prompt_name=prompt_name, prompt=prompt), len(texts))
    for indices, values in embedder.encode_sparse(texts, args.batch_size, args.top_k, prompt=prompt, role=role):
        print(json.dumps({"indices": indices.tolist(), "values": values.tolist()}))
    return 0


def _write_token_vectors(args, vectors: list, texts: int) -> int:
    """A multi-vector encoder's token vectors, as `{"embedding": [[...], ...]}` lines or `--npy` (every token's rows,
    and the offsets of each text's first row, `texts + 1` of them)."""
    import numpy as np

    from kbert.io import atomic_path

    if not args.npy:
        for tokens in vectors:
            print(json.dumps({"embedding": tokens.tolist()}))
        return 0
    offsets = np.concatenate([[0], np.cumsum([len(tokens) for tokens in vectors])]).astype(np.int64)
    for path, array in ((args.npy, np.concatenate(vectors)), (offsets_path(args.npy), offsets)):
        with atomic_path(path) as temporary:
            with open(temporary, "wb") as handle:
                np.save(handle, array)
    print(f"kbert: {offsets[-1]} token vectors of {vectors[0].shape[1]} dimensions for {texts} texts written "
          f"to {args.npy}, each text's first row in {offsets_path(args.npy)}", file=sys.stderr)
    return 0


def _check_kind_options(args, embedder) -> None:
    """The options of one dense vector refused for a sparse or multi-vector encoder (and `--top-k` for any but a
    sparse one), naming them and how its vectors are written."""
    output = embedder.output
    dense_only = [option for option, given in (("--npy", args.npy and output.one_vector),
                                               ("--normalize", args.normalize),
                                               ("--dimensions", args.dimensions), ("--calibrate", args.calibrate),
                                               ("--ranges", args.ranges), ("--precision", args.precision != "float"))
                  if given]
    if dense_only and not output.calibrated:
        raise KbertError(f"{args.model} is {output.listed_as}: {', '.join(dense_only)} shape one dense vector a "
                         f"text; {output.written_as}")
    if args.top_k is not None and output.name != "sparse":
        raise KbertError(f"--top-k: {args.model} is not a sparse encoder; --top-k keeps a sparse encoder's "
                         "largest weights (--dimensions shortens a dense vector)")


def _check_precision_options(args) -> None:
    """`--precision`, `--ranges` and `--calibrate` that cannot go together, refused before anything is read."""
    if args.calibrate and (args.precision != "float" or args.npy or args.ranges):
        raise KbertError("--calibrate writes ranges from float vectors: give it without --precision, --ranges "
                         "or --npy")
    if args.calibrate and os.path.lexists(args.calibrate):
        raise KbertError(f"{args.calibrate}: already exists; choose a new path (kbert never writes over an "
                         "earlier output)")
