"""Argument helpers every command shares: number types, the help formatter, model and output options."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Tuple

from kbert.errors import ConfigError, KbertError, is_whole_number
from kbert.models.config import BertConfig, bundled_config_names, bundled_config_path
from kbert.models.registry import FAMILIES, resolve
from kbert.tasks import TASKS

if TYPE_CHECKING:
    from kbert.serving.runtimes import Runtime

DEFAULT_CONFIG = "bert_base_chinese.json"


class HelpWithDefaults(argparse.HelpFormatter):
    """Ends every option's help with its default (unless the help already names it)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.required or action.default is argparse.SUPPRESS \
                or (not action.option_strings and action.nargs != "?"):
            return text
        if action.default is False:
            shown = "off"
        elif action.default is None:
            shown = "none"
        else:
            shown = "%(default)s"
        return f"{text} (default: {shown})"


def non_negative_int(text: str) -> int:
    return _whole_number(text, minimum=0)


def positive_int(text: str) -> int:
    return _whole_number(text, minimum=1)


def positive_float(text: str) -> float:
    """A number above 0 (seconds, say)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
    return value


def port_number(text: str) -> int:
    """A TCP port: 0 (any free one) to 65535."""
    value = _whole_number(text, minimum=0)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 (any free one) to 65535, got {text!r}")
    return value


def host_name(text: str) -> str:
    """An address to listen on; an empty one (an unset $HOST, say) is refused rather than read as every interface."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected an address (127.0.0.1: this machine only; 0.0.0.0: every "
                                         "interface, said explicitly), got an empty one")
    return text.strip()


def _whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if not is_whole_number(value, minimum):
        expected = "a positive integer" if minimum == 1 else "a non-negative integer"
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def family_argument(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument("--model", choices=list(FAMILIES), default=None,
                        help=f"the model family, by bert4keras's names ({default})")


CHECKPOINT_FORMS = ("a Google checkpoint, safetensors, a model directory, or a name: hf://OWNER/NAME[@REV], "
                    "modelscope://OWNER/NAME, an archive's https:// or file:// URL, or a preset (kbert presets)")


def checkpoint_argument(parser: argparse.ArgumentParser, help: str, positional: bool = False) -> None:
    """The checkpoint (`--checkpoint`, or a positional `checkpoint`) by path or by name, and `--cache-dir`."""
    parser.add_argument("checkpoint" if positional else "--checkpoint", metavar="CKPT",
                        help=f"{help}: {CHECKPOINT_FORMS}")
    parser.add_argument("--cache-dir", help="where named checkpoints are kept: archives unpacked here, hf:// and "
                                            "modelscope:// under it (default: $KBERT_CACHE, else ~/.cache/kbert, "
                                            "for archives; the hubs' own caches for theirs)")


def fetch_checkpoint_argument(args):
    """Replaces a checkpoint name in `args.checkpoint` by its local path (fetching it once); the family a
    preset names becomes `args.model` unless one was given. Returns the checkpoint's files, or None."""
    from kbert.checkpoints.formats import checkpoint_files

    if not args.checkpoint:
        return None
    files = checkpoint_files(args.checkpoint, args.cache_dir)
    args.checkpoint = files.weights
    if getattr(args, "model", None) is None and files.family:
        args.model = files.family
    return files


def model_arguments(parser: argparse.ArgumentParser, default_labels: Optional[int]) -> None:
    """A config (path or bundled name) and the heads to build on it."""
    parser.add_argument("config", nargs="?", default=None,
                        help="bert_config.json / config.json, or a bundled config name "
                             f"(default: {DEFAULT_CONFIG})")
    labels_default = ("2 for the default config, else none" if default_labels is None
                      else default_labels or "none")
    parser.add_argument("--num-labels", type=non_negative_int, default=default_labels, metavar="N",
                        help="add the classifier head (CLS-token -> dense_output) with N labels "
                             f"(default: {labels_default})")
    parser.add_argument("--pool", action="store_true", help="add the pooler")
    parser.add_argument("--nsp", action="store_true", help="add the NSP head (implies --pool)")
    parser.add_argument("--mlm", action="store_true", help="add the masked-LM head")
    parser.add_argument("--discriminator", action="store_true", help="add ELECTRA's discriminator head")
    family_argument(parser, "default: the config's model_type, else bert")


def heads(args) -> dict:
    """The builder's head flags from `model_arguments`."""
    return {"with_pool": args.pool, "with_nsp": args.nsp, "with_mlm": args.mlm,
            "with_discriminator": args.discriminator}


def resolve_config(argument: Optional[str], model: Optional[str] = None) -> BertConfig:
    """A config file path, or the name of a bundled config (with or without .json), read as `model`'s config."""
    if argument is None:
        return resolve(bundled_config_path(DEFAULT_CONFIG), model)[1]
    if not os.path.exists(argument):
        name = argument if argument.endswith(".json") else f"{argument}.json"
        bundled = bundled_config_path(name)
        if os.sep not in argument and os.path.exists(bundled):
            return resolve(bundled, model)[1]
        raise ConfigError(f"{argument}: config file not found (bundled configs: "
                          f"{', '.join(bundled_config_names())})")
    return resolve(argument, model)[1]


def precision_option(parser: argparse.ArgumentParser, weights: bool = False) -> None:
    """`--mixed-precision`, and with `weights` (commands that run a model, not train or export it) `--dtype`."""
    parser.add_argument("--mixed-precision", choices=["bf16", "fp16"],
                        help="compute in this precision, weights and softmax/loss/CRF in float32 (default: "
                             "none, all float32); bf16 pays on CPUs with avx512_bf16/amx_bf16 and on GPUs")
    if weights:
        parser.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto",
                            help="hold the weights in this dtype: bfloat16 loads the model in half the memory and "
                                 "computes in bfloat16 (softmax/CRF heads stay float32); auto (the default): "
                                 "bfloat16 where the CPU has AMX (amx_bf16) and a bfloat16 product measures faster, "
                                 "else float32 (or what KBERT_DTYPE names); float32 for bit-for-bit work")


RUNTIMES = ("keras", "onnxruntime", "openvino")  # what runs a classifier's or an embedding model's batches


def adapter_names(names: "list | None") -> "str | list | None":
    """A repeatable `--adapter`'s tasks as `Embedder.load` takes them: one merged in (its name), several (or
    `all`) computed from one set of weights (the list), none (None)."""
    if not names or (len(names) == 1 and names[0] != "all"):
        return names[0] if names else None
    return names


def embedding_head_argument(parser: argparse.ArgumentParser) -> None:
    """`--head`: which of bge-m3's outputs an embedding model gives (`Embedder.load(head=)`)."""
    parser.add_argument("--head", choices=("dense", "sparse", "colbert"),
                        help="bge-m3's vectors: dense (the folder's own, the default), sparse (its sparse_linear.pt: "
                             "{\"indices\", \"values\"}) or colbert (its colbert_linear.pt: a vector per token)")


def runtime_options(parser: argparse.ArgumentParser, what: str, why: str, auto: bool = False) -> None:
    """`--runtime`, `--quantize` and `--calibration`: run `what` through onnxruntime or OpenVINO, on its ONNX export
    made (and checked against Keras) as the command starts; `why` says what that buys here. With `auto`, the
    default is `--runtime auto` (`auto_runtime`), else Keras."""
    parser.add_argument("--runtime", choices=("auto", *RUNTIMES) if auto else RUNTIMES,
                        default="auto" if auto else "keras",
                        help=f"{what}: onnxruntime runs its float32 ONNX export (made and checked against Keras "
                             f"as the command starts; pip install 'kbert[onnx]'), {why}; openvino compiles that "
                             "export for this CPU, in bfloat16 where the CPU has bfloat16 units unless --dtype "
                             "float32 (pip install 'kbert[onnx,openvino]')" + (
                                 "; auto (the default): openvino where it is installed and --dtype, KBERT_DTYPE "
                                 "and --mixed-precision are left unset, on TensorFlow, else keras (its export is "
                                 "kept in kbert's cache for the next run)" if auto else " (default: keras)"))
    parser.add_argument("--quantize", choices=("int8",),
                        help=f"{what}: int8 through onnxruntime (dynamic: int8 weights; implies --runtime "
                             "onnxruntime unless --runtime openvino), or with --runtime openvino OpenVINO's static "
                             "int8 (weights and activations, calibrated on --calibration's texts); faster on CPU, "
                             "within a few hundredths of float32")
    parser.add_argument("--calibration", metavar="FILE",
                        help="--runtime openvino --quantize int8: texts like those the model will see, one a line "
                             "(a reranker's: query<TAB>passage; at least 16; 300 sampled evenly from a longer "
                             "file); kbert embed samples its own input where this is left out")


def importable(module: str) -> bool:
    """Whether `module` is installed, without importing it."""
    return importlib.util.find_spec(module) is not None


def auto_runtime(args: argparse.Namespace, backend: str, installed: Callable[[str], bool] = importable,
                 environ: Mapping[str, str] = os.environ) -> Tuple[str, str]:
    """`--runtime auto`'s rule (`kbert embed`'s default): OpenVINO, the fastest CPU engine measured for an
    embedding model (docs/performance.md), wherever nothing asks for Keras's own numbers; Keras elsewhere.

    Args:
        args: the command's options (`--quantize`, `--dtype`, `--mixed-precision`, `--ray`).
        backend: Keras's backend (the export is traced from TensorFlow's graph).
        installed: whether a module is installed (default: `importable`).
        environ: the environment (`KBERT_DTYPE`).

    Returns the runtime (`keras`, `onnxruntime` or `openvino`) and why.

    Example:
    >>> import argparse
    >>> args = argparse.Namespace(quantize=None, dtype="auto", mixed_precision=None, ray=None)
    >>> auto_runtime(args, "tensorflow", lambda module: True, environ={})[0]
    'openvino'
    >>> auto_runtime(args, "tensorflow", lambda module: True, environ={"KBERT_DTYPE": "float32"})
    ('keras', "auto: KBERT_DTYPE=float32 asks for Keras's own numbers")
    >>> auto_runtime(args, "jax", lambda module: True, environ={})[1]
    "auto: Keras runs on jax; the export is traced from TensorFlow's graph"
    """
    from kbert.training.precision import DTYPE_VARIABLE

    if args.quantize:
        return "onnxruntime", f"auto: --quantize {args.quantize} alone is onnxruntime's dynamic int8"
    keras_because = ("--ray runs Keras in each actor" if getattr(args, "ray", None) else
                     f"--mixed-precision {args.mixed_precision} is Keras's" if args.mixed_precision else
                     f"--dtype {args.dtype} asks for Keras's own numbers" if args.dtype != "auto" else
                     f"{DTYPE_VARIABLE}={environ[DTYPE_VARIABLE]} asks for Keras's own numbers"
                     if environ.get(DTYPE_VARIABLE) else
                     f"Keras runs on {backend}; the export is traced from TensorFlow's graph"
                     if backend != "tensorflow" else None)
    if keras_because:
        return "keras", f"auto: {keras_because}"
    missing = [module for module in ("openvino", "tf2onnx", "onnxruntime") if not installed(module)]
    if missing:
        return "keras", (f"auto: {', '.join(missing)} not installed (pip install 'kbert[onnx,openvino]' for "
                         "OpenVINO, the fastest CPU engine here)")
    return "openvino", "auto: OpenVINO is installed, the fastest CPU engine measured (docs/performance.md)"


def ray_option(parser: argparse.ArgumentParser, what: str) -> None:
    """`--ray [ADDRESS]`: run `what` on a Ray cluster (pip install 'kbert[ray]')."""
    parser.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                        help=f"{what} on a Ray cluster: ADDRESS (auto: the cluster `ray start` made on this machine; "
                             "ray://HOST:10001: a remote one), or none for a local cluster of this machine's cores "
                             "(pip install 'kbert[ray]'; docs/cluster.md)")


def ray_address(args: argparse.Namespace) -> "str | None":
    """`--ray`'s address as `ray.init` takes it (None: a local cluster), after checking Ray is installed."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise KbertError("--ray needs Ray: pip install 'kbert[ray]' (ray[data,serve])") from None
    return None if args.ray == "local" else args.ray


def runtime_name(args: argparse.Namespace) -> str:
    """What `runtime_options` ask to run the model: `keras`, `onnxruntime` (also implied by --quantize alone) or
    `openvino` (`--runtime auto` resolved already, by `kbert.cli.main`)."""
    return "onnxruntime" if args.runtime == "keras" and args.quantize else args.runtime


def runtime_option(args: argparse.Namespace) -> str:
    """The option that asked for an exported runtime, as an error names it: `--quantize int8` or `--runtime NAME`."""
    return f"--quantize {args.quantize}" if args.quantize else f"--runtime {runtime_name(args)}"


def exported_runtime(args: argparse.Namespace) -> "Runtime | None":
    """What `runtime_options` ask for (`kbert.serving.runtimes.Runtime`), None for Keras, with --calibration's texts
    read. Refused: onnxruntime beside a precision other than float32, --calibration without OpenVINO's int8."""
    from kbert.serving.runtimes import Runtime
    from kbert.serving.openvino import read_calibration_texts

    name = runtime_name(args)
    runtime = None if name == "keras" else Runtime(name, args.quantize, args.dtype if name == "openvino" else
                                                   "float32")
    if args.calibration and not (runtime and runtime.static_int8):
        raise KbertError(f"--calibration {args.calibration}: the texts OpenVINO's static int8 is calibrated on; "
                         "give it with --runtime openvino --quantize int8")
    if runtime is None:
        return None
    given = (f"--mixed-precision {args.mixed_precision}" if args.mixed_precision else
             f"--dtype {args.dtype}" if name == "onnxruntime" and args.dtype == "bfloat16" else None)
    if given:
        raise KbertError(f"{runtime_option(args)} with {given}: the ONNX file is made from the float32 model; pick one")
    if args.calibration:
        return dataclasses.replace(runtime, calibration=read_calibration_texts(args.calibration))
    return runtime


def calibrated_on_input(runtime: "Runtime | None", texts: list) -> "Runtime | None":
    """`runtime`, its OpenVINO static int8 calibrated on a sample of `texts` (`kbert embed`'s input) where
    --calibration gave no texts."""
    from kbert.serving.openvino import calibration_sample

    if runtime is None or not runtime.static_int8 or runtime.calibration is not None:
        return runtime
    return dataclasses.replace(runtime, calibration=calibration_sample(texts, "the input (no --calibration FILE "
                                                                              "given)"))


def inference_arguments(parser, task_help: str) -> None:
    """What `evaluate` and `predict` share: the model directory, batching, generation, precision."""
    parser.add_argument("--model", required=True, help="model directory from kbert train")
    parser.add_argument("--task", choices=TASKS, help=f"the model's task, {task_help}")
    parser.add_argument("--batch-size", type=positive_int, default=64, help="examples per step")
    parser.add_argument("--no-bucketing", action="store_true",
                        help="batch the texts in input order instead of by length (results are in input "
                             "order either way)")
    parser.add_argument("--beam-size", type=positive_int, default=1,
                        help="seq2seq: beam search with this many beams (default: 1, greedy)")
    parser.add_argument("--max-new-tokens", type=positive_int,
                        help="seq2seq: the longest target (default: what --maxlen of training leaves after each source)")
    parser.add_argument("--columns", metavar="FIELD=COLUMN,...",
                        help="the columns (or JSON keys) of the data when their names are not known, e.g. "
                             "text=review,label=sentiment")
    parser.add_argument("--top-k", type=positive_int, default=5,
                        help="a pre-trained model (kbert pretrain): the tokens given for each [MASK] of a text")
    parser.add_argument("--model-parallel", type=positive_int, default=1, metavar="N",
                        help="JAX: the model split over N devices as kbert train --model-parallel splits it")
    precision_option(parser, weights=True)
    embedding_head_argument(parser)
