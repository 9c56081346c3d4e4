"""`kbert migrate`: rewrites a bert4keras script for kbert and Keras 3, and says what it changed and what it could not.

The script is parsed with Python's `ast`; every change replaces the exact
source span of a node, so comments and layout stay as they were. Migrating
a migrated script changes nothing.

What it changes:
- `bert4keras.X` imports (and references) → `kbert.compat.X`; Keras 2's
  backend (`import keras.backend as K`, `from keras import backend as K`) →
  `kbert.compat.keras2`;
- weights file names Keras 3 rejects: a string ending in `.weights` gets
  `.h5`, a name given to `save_weights`/`load_weights` without `.weights.h5`
  gets it, and a model file name given to `save`/`load_model` with no
  suffix, `.model` or `.hdf5` becomes `.keras` (not `np.save`'s); each everywhere the same string appears, so the
  matching load reads what the save wrote;
- Keras 2 methods Keras 3 removed: `fit_generator`/`predict_generator`/
  `evaluate_generator` → `fit`/`predict`/`evaluate`,
  `layer.get_output_at(i)` → `get_output_at(layer, i)` (imported from
  `kbert.compat.backend`), an optimizer's `lr=` → `learning_rate=`;
- `model.predict([[token_ids], [segment_ids]])` (nested Python lists, which
  Keras 3 does not read as two inputs) → `model.predict(to_array([token_ids],
  [segment_ids]))` (imported from `kbert.compat.snippets`);
- bert4keras's graph-mode `adversarial_training(model, embedding_name,
  epsilon)` and `virtual_adversarial_training(model, embedding_name, epsilon,
  xi, iters)` functions (`K.gradients`, `model._make_train_function`) → an
  import of the same name from `kbert.compat.adversarial`, a Keras 3 train step;
- the `loss_with_gradient_penalty(y_true, y_pred, epsilon)` loss (`K.gradients`
  inside a loss) → an import of `kbert.compat.adversarial`'s, the plain
  loss, and after each `compile(loss=loss_with_gradient_penalty)` a
  `gradient_penalty(model, embedding_name, epsilon)` line that adds the
  penalty as a Keras 3 train step.

What it reports as a manual change (with the code to use instead): other
graph-mode gradient code (`K.gradients` outside a layer's `call`, where it
runs in Keras 3's compiled TensorFlow graph as in Keras 2's; `K.function`,
`model.total_loss`, `_make_train_function`), `multi_gpu_model`.

Example:
>>> result = migrate_source("from bert4keras.backend import keras, K\\n"
...                         "model.save_weights('best_model.weights')\\n")
>>> print(result.source, end="")
from kbert.compat.backend import keras, K
model.save_weights('best_model.weights.h5')
>>> migrate_source(result.source).findings
[]
"""

from __future__ import annotations

import ast
import codecs
import dataclasses
import os
import stat
import re
from typing import Dict, List, Optional, Tuple

from kbert.errors import KbertError
from kbert.io import atomic_path

NEW_PACKAGE = "kbert.compat"
KERAS2_BACKENDS = ("keras.backend", "tensorflow.keras.backend", "tensorflow.python.keras.backend")
# Model file names Keras 2 saved and Keras 3 rejects (it takes `.keras`, or the legacy `.h5`).
KERAS2_MODEL_SUFFIXES = ("", ".model", ".hdf5")
NOT_KERAS = {"np", "numpy", "torch", "joblib", "pickle", "tf"}  # their save() is not a Keras model's
RENAMED_METHODS = {"fit_generator": "fit", "predict_generator": "predict", "evaluate_generator": "evaluate"}
KERAS_OPTIMIZERS = {"Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam", "Ftrl", "Lion",
                    "Adafactor", "AdaFactor"}
# bert4keras's graph-mode training functions and what kbert.compat.adversarial's of the same name are.
TRAIN_STEP_FUNCTIONS = {"adversarial_training": "FGM", "virtual_adversarial_training": "virtual adversarial training"}
GRAPH_MODE = {
    "gradients": "K.gradients runs in Keras 3 only inside a layer's call() on TensorFlow (a compiled graph, as "
                 "Keras 2's); elsewhere take gradients in a train step with the backend's autodiff; "
                 "for FGM adversarial training call kbert.compat.adversarial.adversarial_training(model, "
                 "'Embedding-Token', epsilon), for a gradient penalty gradient_penalty(model, "
                 "'Embedding-Token', epsilon) after compile, with the plain loss in compile, for VAT "
                 "virtual_adversarial_training(model, 'Embedding-Token')",
    "function": "K.function has no Keras 3 form: call the model (model.predict, or model(inputs)), or build "
                "a keras.Model whose outputs are the tensors you need",
    "_make_train_function": "Keras 3 makes the train function in fit(); override train_step, or use "
                            "kbert.compat.adversarial",
    "total_loss": "Keras 3 models have no total_loss tensor: compute the loss in a train step "
                  "(model.compute_loss) under tf.GradientTape",
    "_feed_inputs": "Keras 3 models have no feed inputs: use model.inputs",
    "multi_gpu_model": "Keras 3 has no multi_gpu_model: build and compile the model under "
                       "tf.distribute.MirroredStrategy().scope()",
}


@dataclasses.dataclass(frozen=True)
class Finding:
    """One change made (`fixed`), or one place that needs a person, with what to write instead."""

    line: int
    fixed: bool
    message: str

    def format(self, filename: str) -> str:
        return f"{filename}:{self.line}: {'changed' if self.fixed else 'manual'}: {self.message}"


@dataclasses.dataclass
class Migration:
    """The original source, the migrated one and the findings, in line order."""

    original: str
    source: str
    findings: List[Finding]

    @property
    def manual(self) -> List[Finding]:
        return [finding for finding in self.findings if not finding.fixed]


class SourceEdits:
    """Replacements of exact spans of a Python source, found through its `ast` nodes.

    `ast` columns count UTF-8 bytes, so the spans are byte offsets into the
    encoded source (a Chinese comment before a node shifts nothing).
    """

    def __init__(self, source: str):
        self.data = source.encode("utf-8")
        self.line_starts = [0]
        for line in self.data.splitlines(keepends=True):
            self.line_starts.append(self.line_starts[-1] + len(line))
        self.edits: List[Tuple[int, int, str]] = []

    def span(self, node) -> Tuple[int, int]:
        return (self.line_starts[node.lineno - 1] + node.col_offset,
                self.line_starts[node.end_lineno - 1] + node.end_col_offset)

    def text(self, node) -> str:
        start, end = self.span(node)
        return self.data[start:end].decode("utf-8")

    def result(self) -> str:
        """The source with the replacements made, last first; one inside a replacement already made is dropped."""
        result, covered_from = self.data, len(self.data) + 1
        for start, end, new in sorted(self.edits, key=lambda edit: (edit[0], edit[1]), reverse=True):
            if end > covered_from:
                continue
            result = result[:start] + new.encode("utf-8") + result[end:]
            covered_from = start
        return result.decode("utf-8")


class _Rewriter(SourceEdits, ast.NodeVisitor):
    """Collects the migration's replacements and findings over one module's tree."""

    def __init__(self, source: str):
        super().__init__(source)
        self.findings: List[Finding] = []
        self.needed_names: Dict[str, set] = {}  # kbert.compat module -> names the rewritten code imports from it
        self.optimizer_names = set(KERAS_OPTIMIZERS)
        self.replaced_functions: List[ast.AST] = []
        self.penalty = ""  # the arguments of gradient_penalty(model, ...) once loss_with_gradient_penalty is replaced
        self.layer_calls = 0  # how deep in `def call` bodies the visit is: K.gradients works there on TensorFlow

    def replace(self, node, new_text: str, message: str) -> None:
        start, end = self.span(node)
        self.edits.append((start, end, new_text))
        self.findings.append(Finding(node.lineno, True, message))

    def manual(self, node, message: str) -> None:
        self.findings.append(Finding(node.lineno, False, message))

    def inside_replaced_function(self, node) -> bool:
        return any(function.lineno <= node.lineno <= function.end_lineno for function in self.replaced_functions)

    # -- imports --
    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        old = self.text(node)
        if module == "bert4keras" or module.startswith("bert4keras."):
            new = re.sub(r"^from(\s+)bert4keras", rf"from\g<1>{NEW_PACKAGE}", old)
            self.replace(node, new, f"{old.splitlines()[0]} → {new.splitlines()[0]}")
        elif module in ("keras", "tensorflow.keras") and any(alias.name == "backend" for alias in node.names):
            if len(node.names) == 1:
                alias = node.names[0]
                new = f"from {NEW_PACKAGE} import keras2 as {alias.asname or 'backend'}"
                self.replace(node, new, f"{old} → {new} (Keras 2's backend functions on Keras 3)")
            else:
                self.manual(node, f"{old}: import Keras 2's backend on its own line as "
                                  f"`from {NEW_PACKAGE} import keras2 as K`")
        elif module in KERAS2_BACKENDS:
            new = re.sub(r"^from(\s+)[\w.]+", rf"from\g<1>{NEW_PACKAGE}.keras2", old)
            self.replace(node, new, f"{old} → {new}")
        if module.endswith("optimizers"):
            self.optimizer_names.update(alias.asname or alias.name for alias in node.names)

    def visit_Import(self, node: ast.Import) -> None:
        names = []
        for alias in node.names:
            name = alias.name
            if name == "bert4keras" or name.startswith("bert4keras."):
                name = NEW_PACKAGE + name[len("bert4keras"):]
            elif name in KERAS2_BACKENDS and alias.asname:
                name = f"{NEW_PACKAGE}.keras2"
            names.append(name + (f" as {alias.asname}" if alias.asname else ""))
        new = "import " + ", ".join(names)
        old = self.text(node)
        if [alias.name for alias in node.names] != [name.split(" as ")[0] for name in names]:
            self.replace(node, new, f"{old} → {new}")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "bert4keras":  # `import bert4keras.snippets` and then `bert4keras.snippets.x`
            self.replace(node, NEW_PACKAGE, f"bert4keras → {NEW_PACKAGE}")

    # -- Keras 2 → 3 --
    def visit_Assign(self, node: ast.Assign) -> None:
        call = node.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id.startswith("extend_with"):
            self.optimizer_names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        uses = {child.attr for child in ast.walk(node) if isinstance(child, ast.Attribute)}
        if node.name in TRAIN_STEP_FUNCTIONS and {"gradients", "_make_train_function"} & uses:
            self._replace_function(node, node.name, f"{TRAIN_STEP_FUNCTIONS[node.name]} as a Keras 3 train step")
            return
        if node.name == "loss_with_gradient_penalty" and "gradients" in uses:
            self._replace_function(node, "gradient_penalty, loss_with_gradient_penalty",
                                   "the plain loss, its penalty a train step added after compile")
            self.penalty = _penalty_arguments(node)
            return
        self.layer_calls += node.name == "call"
        self.generic_visit(node)
        self.layer_calls -= node.name == "call"

    def _replace_function(self, node: ast.FunctionDef, names: str, what: str) -> None:
        """The definition (with its decorators) → an import of `names` from kbert.compat.adversarial."""
        start = min([self.line_starts[node.lineno - 1]] + [self.line_starts[d.lineno - 1]
                                                           for d in node.decorator_list])
        indent = " " * node.col_offset
        new = (f"{indent}# bert4keras's Keras 2 {node.name}: {what} (kbert migrate)\n"
               f"{indent}from {NEW_PACKAGE}.adversarial import {names}\n")
        self.edits.append((start, self.line_starts[node.end_lineno], new))
        self.findings.append(Finding(node.lineno, True, f"the graph-mode {node.name} function → from "
                                     f"{NEW_PACKAGE}.adversarial import {names} ({what})"))
        self.replaced_functions.append(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        """`model.compile(loss=loss_with_gradient_penalty, ...)` → the same, then `gradient_penalty(model, ...)`."""
        call = node.value
        if self.penalty and isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
                and call.func.attr == "compile" and any(
                    keyword.arg == "loss" and isinstance(keyword.value, ast.Name)
                    and keyword.value.id == "loss_with_gradient_penalty" for keyword in call.keywords):
            line = (f"{' ' * node.col_offset}gradient_penalty({self.text(call.func.value)}, {self.penalty})"
                    "  # kbert migrate: the penalty of loss_with_gradient_penalty\n")
            end = self.line_starts[node.end_lineno]
            self.edits.append((end, end, line))
            self.findings.append(Finding(node.end_lineno + 1, True, f"after compile: {line.split('  #')[0].strip()}"))
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in RENAMED_METHODS:
            new = f"{self.text(node.value)}.{RENAMED_METHODS[node.attr]}"
            self.replace(node, new, f".{node.attr} → .{RENAMED_METHODS[node.attr]} (Keras 3 fits generators "
                                    "and datasets in fit)")
        elif node.attr == "lr" and re.search(r"(^|\.)opt\w*$", self.text(node.value)):
            # `model.optimizer.lr`, `K.set_value(opt.lr, 1e-5)`: Keras 3 optimizers call it learning_rate.
            new = f"{self.text(node.value)}.learning_rate"
            self.replace(node, new, f"{self.text(node)} → {new} (Keras 3's name)")
        elif node.attr in GRAPH_MODE and not self.inside_replaced_function(node) \
                and _receiver(node) not in NOT_KERAS | {"tensorflow"} \
                and not (node.attr == "gradients" and self.layer_calls):  # `@tf.function` is no K.function
            self.manual(node, f"{self.text(node)}: {GRAPH_MODE[node.attr]}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        function = node.func
        if isinstance(function, ast.Attribute) and function.attr in ("get_output_at", "get_input_at") \
                and len(node.args) == 1 and not node.keywords:
            new = f"{function.attr}({self.text(function.value)}, {self.text(node.args[0])})"
            self.needed_names.setdefault("backend", set()).add(function.attr)
            self.replace(node, new, f"{self.text(node)} → {new} (Keras 3 layers have no {function.attr})")
            return
        name = function.id if isinstance(function, ast.Name) else function.attr \
            if isinstance(function, ast.Attribute) else None
        if name in ("predict", "predict_on_batch") and node.args and _nested_list(node.args[0]):
            # Keras 2 read [[token_ids], [segment_ids]] as two inputs; Keras 3 takes arrays only.
            rows = ", ".join(self.text(row) for row in node.args[0].elts)
            self.needed_names.setdefault("snippets", set()).add("to_array")
            self.replace(node.args[0], f"to_array({rows})",
                         f"{name}([[...], ...]) → {name}(to_array([...], ...)) (Keras 3 predicts on arrays)")
            self.visit(function)
            return
        if name in self.optimizer_names:
            for keyword in node.keywords:
                if keyword.arg == "lr":
                    self.edits.append((*self._keyword_name_span(keyword), "learning_rate"))
                    self.findings.append(Finding(keyword.lineno, True, f"{name}(lr=...) → "
                                                 f"{name}(learning_rate=...)"))
        self.generic_visit(node)

    def _keyword_name_span(self, keyword: ast.keyword) -> Tuple[int, int]:
        start = self.line_starts[keyword.lineno - 1] + keyword.col_offset
        return start, start + len("lr")


def _nested_list(node: ast.AST) -> bool:
    """A list literal of list literals: `[[token_ids], [segment_ids]]`."""
    return isinstance(node, ast.List) and bool(node.elts) and all(isinstance(row, ast.List) for row in node.elts)


def _weights_file_names(tree: ast.AST) -> Dict[str, str]:
    """Each file-name string to rename, and its new name (see the module's docstring)."""
    renames = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(".weights"):
            renames[node.value] = node.value + ".h5"
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        path = node.args[0].value
        if path in renames:
            continue
        if name in ("save_weights", "load_weights") and not path.endswith(".weights.h5"):
            renames[path] = (path[:-len(".h5")] if path.endswith(".h5") else path) + ".weights.h5"
        elif name in ("save", "load_model") and os.path.splitext(path)[1] in KERAS2_MODEL_SUFFIXES \
                and _receiver(node.func) not in NOT_KERAS:
            renames[path] = os.path.splitext(path)[0] + ".keras"
    return renames


def _penalty_arguments(loss: ast.FunctionDef) -> str:
    """`gradient_penalty`'s arguments after the model for a `loss_with_gradient_penalty` definition: the layer its
    body looks up (`search_layer(y_pred, 'Embedding-Token')`) and its `epsilon` default."""
    names = [node.args[1].value for node in ast.walk(loss) if isinstance(node, ast.Call) and len(node.args) == 2
             and getattr(node.func, "id", getattr(node.func, "attr", None)) == "search_layer"
             and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)]
    arguments = loss.args.args[-len(loss.args.defaults):] if loss.args.defaults else []
    epsilon = next((ast.unparse(default) for argument, default in zip(arguments, loss.args.defaults)
                    if argument.arg == "epsilon"), "1")
    return f"{(names or ['Embedding-Token'])[0]!r}, epsilon={epsilon}"


def _receiver(function) -> Optional[str]:
    """The name a method is called on (`np` in `np.save`), if it is a plain name."""
    value = getattr(function, "value", None)
    return value.id if isinstance(value, ast.Name) else None


def migrate_source(source: str, filename: str = "<script>") -> Migration:
    """The migrated `source` and what was changed or needs a manual change."""
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as error:
        raise KbertError(f"{filename}:{error.lineno}: not Python 3 ({error.msg}); a Python 2 script needs "
                         "2to3 first") from None
    rewriter = _Rewriter(source)
    rewriter.visit(tree)
    renames = _weights_file_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in renames and isinstance(node.value, str) \
                and not rewriter.inside_replaced_function(node):
            old, new = rewriter.text(node), renames[node.value]
            literal = old.replace(node.value, new) if old.count(node.value) == 1 else repr(new)
            rewriter.replace(node, literal, f"{node.value!r} → {new!r} (Keras 3's file names)")
    for module, names in sorted(rewriter.needed_names.items()):
        _add_import(tree, rewriter, f"from {NEW_PACKAGE}.{module} import {', '.join(sorted(names))}")
    return Migration(source, rewriter.result(), sorted(rewriter.findings, key=lambda f: f.line))


def _add_import(tree: ast.Module, rewriter: _Rewriter, statement: str) -> None:
    """Adds `statement` after the module's last top-level import (or at its top)."""
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    line = imports[-1].end_lineno if imports else 0
    offset = rewriter.line_starts[line]
    rewriter.edits.append((offset, offset, statement + "\n"))
    rewriter.findings.append(Finding(line + 1, True, f"added {statement}"))


def migrate_file(script: str, output: Optional[str] = None, in_place: bool = False,
                 overwrite: bool = False) -> Migration:
    """Migrates `script`, writing `output` (or the script itself with `in_place`), atomically.

    An existing `output` is replaced only with `overwrite`; neither writes nothing.
    """
    if output is not None and in_place:
        raise KbertError("migrate: give either an output file or --in-place, not both")
    with open(script, "rb") as handle:
        raw = handle.read()
    try:
        source = raw.decode("utf-8-sig")  # a byte-order mark is no part of the code
    except UnicodeDecodeError as error:
        raise KbertError(f"{script}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    windows = source.count("\r\n") == source.count("\n") > 0  # kept as the file had them
    migration = migrate_source(source.replace("\r\n", "\n"), script)
    # In place: the file a link points to is rewritten (the link stays), with its permissions.
    target = os.path.realpath(script) if in_place else output
    if target is not None and not in_place and os.path.exists(target) and not overwrite:
        raise KbertError(f"{target} exists; pass --overwrite to replace it, or choose another output")
    if target is not None:
        text = migration.source.replace("\n", "\r\n") if windows else migration.source
        with atomic_path(target, stat.S_IMODE(os.stat(target).st_mode) if in_place else None) as temporary:
            with open(temporary, "wb") as handle:
                handle.write((codecs.BOM_UTF8 if raw.startswith(codecs.BOM_UTF8) else b"") + text.encode("utf-8"))
    return migration
