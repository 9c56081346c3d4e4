"""`kbert export`: a model for other runtimes: TF SavedModel, ONNX (int8 too), LiteRT, or a `.keras` file."""

from __future__ import annotations

import os

from kbert.cli.arguments import embedding_head_argument, precision_option


def add_commands(command) -> None:
    """Adds `export` through `command(name, help)`, which returns a sub-parser."""
    export = command("export", "a classifier or tagger for other runtimes: TF SavedModel, ONNX (int8 too), "
                               "LiteRT, or a .keras file; a UniLM seq2seq model's cached step as ONNX")
    export.add_argument("--model", required=True, help="model directory from kbert train")
    export.add_argument("output", metavar="OUT", help="SavedModel directory, or a path ending in .onnx, .tflite "
                                                      "(LiteRT; its metadata goes to NAME.metadata.json) or .keras "
                                                      "(must not exist)")
    export.add_argument("--format", choices=("saved_model", "onnx", "litert", "keras"),
                        help="default: from OUT (.onnx, .tflite, .keras; else a SavedModel directory)")
    export.add_argument("--quantize", choices=("int8",),
                        help="ONNX and LiteRT: int8 weights, run by the runtime's int8 kernels (smaller, and "
                             "faster on CPU with onnxruntime)")
    embedding_head_argument(export)
    export.add_argument("--adapter", metavar="TASK", help="an embedding model with task LoRA adapters "
                                                          "(jina-embeddings-v3): the task whose weights the file "
                                                          "computes, merged in; default: the base weights")
    precision_option(export)
    export.set_defaults(run=run_export)


def run_export(args) -> int:
    import signal

    from kbert.serving.export import export_model

    # SIGTERM (a stopped job, a CI timeout) removes the export's staging folder, then ends the process at once
    # (Python's default for SIGTERM dies without any cleanup; an exception raised wherever the signal lands,
    # inside TensorFlow or a converter, might be turned into another error).
    signal.signal(signal.SIGTERM, _remove_staging_and_exit)
    print(export_model(args.model, args.output, args.format, args.quantize, args.head, args.adapter))
    return 0


def _remove_staging_and_exit(signum, frame) -> None:
    from kbert.serving.conversion import remove_staging

    remove_staging()
    os._exit(128 + signum)
