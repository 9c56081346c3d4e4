"""Every example in kbert's docstrings runs and prints what it says (doctest).

The examples are run from the repository root, where `configs/` is, as a user
of a checkout would run them.
"""

import doctest
import importlib
import pkgutil

import pytest

import kbert
from conftest import REPO

# kbert.__main__ runs the command line when imported.
MODULES = sorted(name for _, name, _ in pkgutil.walk_packages(kbert.__path__, "kbert.") if name != "kbert.__main__")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, monkeypatch):
    monkeypatch.chdir(REPO)
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [test for test in finder.find(module, name) if test.examples]
    for test in tests:
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples in {name} failed (see above)"


def test_the_public_classes_and_functions_have_examples():
    # The modules whose public API users call first carry runnable examples.
    for name in ("kbert", "kbert.builder.backbone", "kbert.builder.heads", "kbert.models.config",
                 "kbert.models.heads", "kbert.tokenizers.wordpiece", "kbert.tokenizers.sentence_piece",
                 "kbert.checkpoints.google", "kbert.embeddings.modules",
                 "kbert.checkpoints.hf", "kbert.layers.embeddings", "kbert.layers.attention",
                 "kbert.layers.feed_forward", "kbert.layers.heads", "kbert.analysis.summary",
                 "kbert.analysis.keras2", "kbert.tokenizers.vocab", "kbert.training.batches",
                 "kbert.training.schedules", "kbert.training.saving", "kbert.training.metrics"):
        module = importlib.import_module(name)
        assert [test for test in doctest.DocTestFinder().find(module, name) if test.examples], name
