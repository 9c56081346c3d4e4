"""kbert's wings import only the wings before them, and no module takes part in an import cycle.

Read from the source with `ast`, so the check covers imports inside functions
and the registries that `importlib` reads ("kbert.models.bert.family:BertFamily"
strings in a module that calls `importlib.import_module`), as well as the
plain `import` statements. The root `kbert/__init__.py` (the public API, every
name imported on first use) and `kbert/__main__.py` are the entry points and
stand outside the wings.
"""

import ast
import pathlib
import re

import pytest

from conftest import REPO

PACKAGE = REPO / "kbert"
# Wing -> rank: a module may import its own wing and wings of lower rank. Wings of one rank
# (analysis, generation) are side by side: neither imports the other. `compat` is bert4keras's
# module layout on all of kbert; the command line's `kbert migrate` uses it.
WINGS = {
    "errors": 0,
    "io": 1,
    "tokenizers": 2, "layers": 2, "hub": 2,
    "models": 3,
    "checkpoints": 4,
    "builder": 5,
    "analysis": 6, "generation": 6,
    "training": 7,
    "embeddings": 8,
    "tasks": 9,
    "serving": 10,
    "compat": 11,
    "cli": 12,
}
ENTRY_POINTS = {"kbert", "kbert.__main__"}
_REGISTRY_STRING = re.compile(r"kbert(?:\.\w+)+(?::\w+)?")


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: pathlib.Path, modules: dict) -> set:
    """Every kbert module that `path` imports, anywhere in the file, or names for `importlib`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = set()
    calls_importlib = any(isinstance(node, ast.Attribute) and node.attr == "import_module"
                          for node in ast.walk(tree))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import of {node.module}"
            for alias in node.names:  # `from kbert.cli import summary` imports the module kbert.cli.summary
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
        elif calls_importlib and isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and _REGISTRY_STRING.fullmatch(node.value):
            found.add(node.value.split(":")[0])
    return {name for name in found if name in modules}


def wing_of(module: str) -> str:
    return module.split(".")[1]


@pytest.fixture(scope="module")
def graph():
    modules = all_modules()
    return {name: imports_of(path, modules) for name, path in modules.items()}


def test_every_module_belongs_to_a_wing(graph):
    homeless = [name for name in graph if name not in ENTRY_POINTS and wing_of(name) not in WINGS]
    assert not homeless, f"modules outside every wing (add them to WINGS, or move them): {homeless}"


def test_no_module_imports_a_later_wing(graph):
    wrong = []
    for module, imported in graph.items():
        if module in ENTRY_POINTS:
            continue
        for target in imported:
            if target in ENTRY_POINTS:
                if WINGS[wing_of(module)] != max(WINGS.values()):
                    wrong.append(f"{module} -> {target} (only the command line uses the package root)")
                continue
            mine, theirs = wing_of(module), wing_of(target)
            if WINGS[theirs] > WINGS[mine] or (WINGS[theirs] == WINGS[mine] and theirs != mine):
                wrong.append(f"{module} ({mine}) -> {target} ({theirs})")
    assert not wrong, "imports against the wing order:\n" + "\n".join(sorted(wrong))


def test_no_import_cycles(graph):
    cycles, state, stack = [], {}, []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_check_sees_lazy_and_registry_imports(graph):
    # Imports inside functions and importlib registries are edges too, or the checks above prove little.
    assert "kbert.models.albert.family" in graph["kbert.models.registry"]  # registry string
    assert "kbert.tasks.ner" in graph["kbert.tasks"]  # registry string
    assert "kbert.training.loop" in graph["kbert.tasks"]  # import inside a function
    assert "kbert.cli.summary" in graph["kbert.cli.main"]  # `from package import module`


def test_a_cycle_and_a_wrong_way_import_would_be_found(tmp_path):
    # The same reader on a made-up pair of modules that import each other.
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    first.write_text("def f():\n    from kbert.cli.main import main\n")
    second.write_text("import importlib\nTABLE = {'x': 'kbert.layers.crf:ConditionalRandomField'}\n"
                      "importlib.import_module\n")
    modules = all_modules()
    assert imports_of(first, modules) == {"kbert.cli.main"}
    assert imports_of(second, modules) == {"kbert.layers.crf"}


def test_setup_cfg_lists_every_package():
    # pip install . and wheels hold only the packages setup.cfg lists.
    import configparser
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    listed = set(config["options"]["packages"].split())
    on_disk = {".".join(path.parent.relative_to(REPO).parts) for path in PACKAGE.rglob("__init__.py")}
    assert on_disk | {"kbert.configs"} == listed, sorted(on_disk ^ (listed - {"kbert.configs"}))


#: The longest a module of kbert/ may be: past it, a module holds more than one concern (docs/layout.md).
MAX_MODULE_LINES = 600


def test_no_module_is_over_the_cap():
    long = {str(path.relative_to(REPO)): lines for path in PACKAGE.rglob("*.py")
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


# The output kinds' classes, and the modules that define them: only there may code tell the kinds apart by class.
KIND_CLASSES = ("OutputKind", "DenseOutput", "SparseOutput", "LexicalOutput", "MultiVectorOutput")
KIND_MODULES = {"kbert.embeddings.kinds", "kbert.embeddings.sparse", "kbert.embeddings.bge_m3",
                "kbert.embeddings.multi_vector"}


def kind_tests_in(path: pathlib.Path) -> list:
    """The lines of `path` that test a value's class against an output kind (`isinstance(x, SparseOutput)`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            names = {leaf.id if isinstance(leaf, ast.Name) else getattr(leaf, "attr", None)
                     for leaf in ast.walk(node.args[1])}
            if names & set(KIND_CLASSES):
                found.append(node.lineno)
    return found


def test_only_the_kinds_tell_the_kinds_apart():
    """What a dense, sparse or multi-vector model does differently is its kind's method, not an `isinstance`
    elsewhere (kbert.embeddings.kinds)."""
    tests = {name: lines for name, path in all_modules().items()
             if name not in KIND_MODULES and (lines := kind_tests_in(path))}
    assert not tests, f"isinstance on an output kind outside the kinds: {tests}"


def test_the_kind_check_finds_an_isinstance(tmp_path):
    path = tmp_path / "example.py"
    path.write_text("def f(output):\n    return isinstance(output, (SparseOutput, str))\n")
    assert kind_tests_in(path) == [2]
