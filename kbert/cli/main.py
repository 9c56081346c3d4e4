"""The `kbert` command: the parser of every sub-command, and how errors reach the user.

Each sub-command parses its arguments and calls the library; errors of kbert
(`KbertError`) and of the file system go to stderr and exit with status 2.
TensorFlow is imported only by the sub-commands that build a model, so
`kbert params` stays fast.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import List, Optional

from kbert import __version__
from kbert.cli import convert, embed, evaluate, export, inspect, migrate, predict, presets, serve, summary, train
from kbert.cli.arguments import HelpWithDefaults
from kbert.errors import KbertError

# The commands that run a trained model: they build it under --mixed-precision.
INFERENCE_COMMANDS = ("evaluate", "predict", "export", "serve", "embed")
# The commands that never import TensorFlow.
PURE_PYTHON_COMMANDS = ("params", "migrate")
# The commands that say which Keras backend runs them.
BACKEND_COMMANDS = ("summary", "train", "pretrain", "serve")


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="kbert: %(message)s")
    # JAX logs its probe for a TPU ("Unable to initialize backend 'tpu'") on every machine without one.
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.ERROR)
    if args.command not in PURE_PYTHON_COMMANDS and keras_backend_name() == "tensorflow":
        _import_tensorflow_quietly()
    if args.command in BACKEND_COMMANDS and keras_backend_name() != "tensorflow":  # the default goes unsaid
        import keras

        logging.getLogger("kbert").info("Keras backend: %s (KERAS_BACKEND picks tensorflow, jax or torch)",
                                        keras.backend.backend())
    if args.command not in PURE_PYTHON_COMMANDS and keras_backend_name() == "jax":
        _cache_jax_compilations()
    try:
        if args.command in INFERENCE_COMMANDS:
            return _run_in_precision(args)
        return args.run(args)
    except BrokenPipeError:
        # The reader of our output went away (`kbert predict ... | head`): stop quietly, as Unix tools do.
        # Python would report the failed flush of stdout at exit: point it at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (KbertError, OSError) as error:  # OSError names its path: permission, disk full
        print(f"kbert: error: {error}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kbert", description="Build, load, inspect and fine-tune BERT-family models in Keras 3.",
        formatter_class=HelpWithDefaults)
    parser.add_argument("--version", action="version", version=f"kbert {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, description=help, formatter_class=HelpWithDefaults)

    for module in (summary, inspect, convert, presets, train, evaluate, predict, embed, export, serve, migrate):
        module.add_commands(command)  # each command's module (or group's) adds its own
    return parser


def _cache_jax_compilations() -> None:
    """Keeps JAX's compiled programs in kbert's cache (`$KBERT_CACHE/jax`) unless the user chose a place.

    JAX compiles a training step for every batch shape it meets: seconds each on a CPU, more on a
    GPU, most of a short run. A later run of the same model on the same shapes reads them back.
    """
    import jax

    from kbert.hub.sources import cache_root

    if jax.config.jax_compilation_cache_dir is not None:  # JAX_COMPILATION_CACHE_DIR sets it
        return
    path = os.path.join(cache_root(), "jax")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:  # a read-only home: JAX would warn at every compilation; run without the cache
        return
    jax.config.update("jax_compilation_cache_dir", path)


def _run_in_precision(args) -> int:
    """Runs an inference command with its model built under --mixed-precision (and --dtype, `auto` chosen here)."""
    from kbert.training.precision import precision_policy, warn_if_emulated

    warn_if_emulated(args.mixed_precision)
    if getattr(args, "model_parallel", 1) > 1:
        _split_the_model(args.model_parallel, args.model)
    with precision_policy(args.mixed_precision, _weight_dtype(args)):
        return args.run(args)


def _weight_dtype(args):
    """`--dtype` resolved (`auto`: for this machine) for the Keras model (the loaders log it as the model loads:
    an input refused before says nothing of it), and put back in `args.dtype`; float32 under --mixed-precision,
    and where onnxruntime or OpenVINO runs the model's export (made from float32; OpenVINO takes `args.dtype` as
    its own precision, auto left to it). None for a command without `--dtype`."""
    from kbert.cli.arguments import runtime_name
    from kbert.training.precision import DtypeChoice, choose_dtype

    if getattr(args, "dtype", None) is None:
        return None
    if getattr(args, "runtime", None) == "auto":
        _choose_runtime(args)
    runtime = runtime_name(args) if hasattr(args, "runtime") else "keras"
    if runtime != "keras":
        return DtypeChoice("float32", f"{runtime} runs the model's export, made from float32")
    if args.dtype == "auto" and args.mixed_precision:
        return DtypeChoice("float32", f"auto: --mixed-precision {args.mixed_precision}")
    choice = choose_dtype(args.dtype)
    args.dtype = choice.dtype
    return choice


def _choose_runtime(args) -> None:
    """`--runtime auto` resolved (`kbert.cli.arguments.auto_runtime`) into `args.runtime`, and logged;
    `args.runtime_auto` says auto chose it (a command then falls back to Keras where OpenVINO cannot run its
    model; `--quantize` asks for onnxruntime by name, and its export is refused, not replaced, where it fails)."""
    from kbert.cli.arguments import auto_runtime

    args.runtime, reason = auto_runtime(args, keras_backend_name())
    args.runtime_auto = not args.quantize
    logging.getLogger("kbert").info("runtime: %s (%s)", args.runtime, reason)


def _split_the_model(model_parallel: int, model_dir: str) -> None:
    """`--model-parallel N`: the model directory's model built split over N devices (JAX)."""
    import keras

    from kbert.models.config import BertConfig
    from kbert.training.distribute import model_parallel_distribution

    if keras.backend.backend() != "jax":
        raise KbertError(f"--model-parallel runs on JAX (keras.distribution.ModelParallel); KERAS_BACKEND is "
                         f"{keras.backend.backend()}")
    config_path = os.path.join(model_dir, "config.json")
    config = BertConfig.from_json_file(config_path) if os.path.exists(config_path) else None
    keras.distribution.set_distribution(model_parallel_distribution(model_parallel, config))


def keras_backend_name() -> str:
    """The backend Keras will load, read as Keras reads it (`KERAS_BACKEND`, then keras.json), without loading it."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME", os.path.join(os.path.expanduser("~"), ".keras"))
    try:
        with open(os.path.join(home, "keras.json"), encoding="utf-8") as handle:
            return json.load(handle).get("backend", "tensorflow")
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def _import_tensorflow_quietly() -> None:
    """Imports TensorFlow with its start-up chatter (CUDA probing, absl) kept off stderr.

    Those lines are printed by C++ code before any log level applies, so the
    file descriptor itself is pointed at /dev/null for the import.
    """
    # Level 3 also hides "failed call to cuInit" on machines without a GPU;
    # Python exceptions are unaffected. Set TF_CPP_MIN_LOG_LEVEL to see them.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow

        # The devices are probed once, on first use (cuInit on a machine without a GPU logs an error line
        # past the log level now and then): done here, while stderr is closed.
        tensorflow.config.list_physical_devices()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
