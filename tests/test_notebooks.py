"""The notebooks are stored executed, with their figures; they run again top to bottom on CPU (as a
student would run them) and show their results: the figures, and figures of merit above chance. The runs are
example runs, left out unless `pytest --run-examples` (CI runs them); that each is stored executed is always
checked."""

import pathlib
import re

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import shared_path

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"

# Text each notebook's outputs must contain (a cell that fails raises in execute()).
SHOWS = {
    "bert_parameters.ipynb": ["Total params: 101,678,594", "✓ all 53 rows agree with the built model",
                              "analytic 324,472,832   built 324,472,832",
                              "75,641,856 + 25,952,256 + 36,864 + 46,080 = 101,677,056"],
    "fine_tune_classifier.ipynb": ["best epoch", "validation accuracy 0.", "confusion (rows: truth)"],
    "seq2seq_unilm.ipynb": ["the target's last token sees 13", "validation target-token accuracy 0.",
                            "exact match 0.", "same tokens: True"],
    "t5_and_gpt2.ipynb": ["distance   -16: encoder bucket 10   decoder bucket 16", "constant along each diagonal: True",
                          "greedy", "beam", "start_id 0:", "same tokens: True"],
    "pretraining.ipynb": ["words: 很 / 安静 / , / 隔音 / 设施", "| to predict: ", "loss fell from",
                          "'bert_model.ckpt.index'", "chance is 1/21128"],
    "ner_crf.ipynb": ["scheme BMES units char", "validation entity F1 0.", "B-PER -> O", "overall  precision 0."],
}

# Figures (PNG outputs) each notebook draws.
FIGURES = {"bert_parameters.ipynb": 1, "fine_tune_classifier.ipynb": 1, "ner_crf.ipynb": 1, "seq2seq_unilm.ipynb": 1,
           "t5_and_gpt2.ipynb": 2, "pretraining.ipynb": 2}
# A number the notebook prints, and the least it may be: above what guessing gets.
SCORES = {
    "fine_tune_classifier.ipynb": (r"best epoch \d+ validation accuracy (0\.\d+)", 0.6),  # two balanced classes
    "ner_crf.ipynb": (r"validation entity F1 (0\.\d+)", 0.05),  # a guessed span is almost never exact
    "seq2seq_unilm.ipynb": (r"validation target-token accuracy (0\.\d+)", 0.1),  # 21,128 tokens to pick from
}

# What each notebook reads from ../shared.
DATA = {"fine_tune_classifier.ipynb": ("data", "sentiment"), "ner_crf.ipynb": ("data", "msra_ner"),
        "seq2seq_unilm.ipynb": ("data", "msra_ner"), "t5_and_gpt2.ipynb": ("fixtures", "bert4keras_families"),
        "pretraining.ipynb": ("data", "sentiment")}


def figures(notebook) -> int:
    return sum("image/png" in output.get("data", {}) for cell in notebook.cells for output in cell.get("outputs", []))


def outputs_text(notebook) -> str:
    """All printed and displayed text, without the terminal colours of Keras's summary."""
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            parts.append(output.get("data", {}).get("text/plain", ""))
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(parts))


@pytest.mark.examples
@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_notebook_runs_and_shows_its_results(name):
    if name in DATA:
        shared_path(*DATA[name])  # skips without ../shared
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(notebook, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    text = outputs_text(notebook)
    for expected in SHOWS[name]:
        assert expected in text, f"{name} does not show {expected!r}"
    assert figures(notebook) >= FIGURES[name], f"{name} draws {figures(notebook)} figures"
    if name in SCORES:
        pattern, least = SCORES[name]
        found = re.search(pattern, text)
        assert found and float(found.group(1)) > least, f"{name}: {pattern} gave {found and found.group(1)}"


@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_notebook_is_stored_executed_with_its_figures(name):
    # GitHub shows the stored outputs: every code cell ran, in order, and the figures are there.
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    counts = [cell.execution_count for cell in notebook.cells if cell.cell_type == "code"]
    assert counts == list(range(1, len(counts) + 1)), f"{name}: execution counts {counts}"
    assert figures(notebook) >= FIGURES[name], f"{name} is stored with {figures(notebook)} figures"
