"""The notebooks run top to bottom on CPU (as a student would run them)."""

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import shared_path

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[1] / "notebooks"


@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_notebook_runs(name):
    if name == "fine_tune_classifier.ipynb":
        shared_path("data", "sentiment")  # skips without ../shared
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(notebook, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    errors = [output for cell in notebook.cells for output in cell.get("outputs", [])
              if output.get("output_type") == "error"]
    assert not errors
