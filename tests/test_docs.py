"""The README's and docs/ pages' commands run as written, from the repository root.

Every `kbert params` and `kbert summary` line of a bash block runs and must succeed. A Python
block runs (with `import kbert` first, as the pages assume) when every file it names exists:
files beside the checkout (`../shared`) and the bundled configs do; a block that names a
checkpoint the reader brings (`chinese_L-12_H-768_A-12/...`) is not run here; the tests of its
subject cover it (`test_checkpoint.py`, `test_hf.py`, `test_families.py`). The long training
commands are run on slices by `test_cli.py`, `test_ner.py` and `test_seq2seq.py`.
"""

import re
import shlex
import subprocess
import sys

import pytest

from conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)
_PATH = re.compile(r"""["']([\w.\-/]+\.(?:json|txt|ckpt|bmes|data|tsv|safetensors))["']""")


def blocks(language: str):
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            if match.group(1) == language:
                line = text[:match.start()].count("\n") + 1
                yield f"{page.relative_to(REPO)}:{line}", match.group(2)


def cli_lines():
    for where, code in blocks("bash"):
        for line in code.replace("\\\n", " ").splitlines():
            command = line.split("#")[0].strip()
            args = shlex.split(command)[1:]
            files = [arg for arg in args if arg.endswith((".json", ".ckpt", ".safetensors"))]
            if re.match(r"kbert (params|summary)\b", command) and all((REPO / f).exists() for f in files):
                yield f"{where} {command}", args


def runnable_python():
    for where, code in blocks("python"):
        if all((REPO / path).exists() for path in _PATH.findall(code)):
            yield where, code


def run(args, **kwargs):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO, timeout=600,
                          **kwargs)


@pytest.mark.parametrize("where, args", list(cli_lines()), ids=[where for where, _ in cli_lines()])
def test_command_lines(where, args):
    result = run(["-m", "kbert", *args])
    assert result.returncode == 0, f"{where}:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    assert "✗" not in result.stdout, where


@pytest.mark.parametrize("where, code", list(runnable_python()), ids=[where for where, _ in runnable_python()])
def test_python_blocks(where, code):
    if "../shared" in code and not (REPO.parent / "shared").exists():
        pytest.skip("../shared is not beside the checkout")
    result = run(["-c", "import kbert\n" + code])
    assert result.returncode == 0, f"{where}:\n{result.stderr[-3000:]}"


def test_the_pages_have_commands_that_run():
    # So that a change in the pages' format cannot leave the tests above with nothing to run.
    assert len(list(cli_lines())) >= 5
    assert len(list(runnable_python())) >= 4
