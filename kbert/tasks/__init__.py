"""Tasks built on the models: their data, their heads, how they are trained and scored.

- `base`: what `kbert train` asks of a task (`Task`, `TrainingData`).
- `classification`: a label per text (the default task).
- `labelling`: tagged files, tag schemes, spans, entity scores.
- `ner`: the tagger: units and WordPiece chunks, CRF/softmax/GlobalPointer heads, decoding.
"""

from kbert.errors import KbertError

TASKS = ("classify", "ner")


def get_task(options):
    """The `Task` for `options.task` (and `options.head`)."""
    if options.task == "classify":
        from kbert.tasks.classification import ClassificationTask

        return ClassificationTask()
    if options.task == "ner":
        from kbert.tasks.ner import NerTask

        return NerTask(options.head)
    raise KbertError(f"unknown task {options.task!r}; expected one of {', '.join(TASKS)}")
