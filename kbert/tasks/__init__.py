"""Tasks built on the models: their data, their heads, how they are trained and scored.

- `base`: what `kbert train` asks of a task (`Task`, `TrainingData`).
- `classification`: a label per text (the default task).
- `labelling`: tagged files, tag schemes, spans, entity scores.
- `ner`: the tagger: units and WordPiece chunks, CRF/softmax/GlobalPointer heads, decoding.
- `seq2seq`: UniLM fine-tuning on source/target pairs; generation, exact match and character F1.
"""

from kbert.errors import KbertError

TASKS = ("classify", "ner", "seq2seq")


def get_task(options):
    """The `Task` for `options.task` (and `options.head`)."""
    if options.task == "classify":
        from kbert.tasks.classification import ClassificationTask

        return ClassificationTask()
    if options.task == "ner":
        from kbert.tasks.ner import NerTask

        return NerTask(options.head)
    if options.task == "seq2seq":
        from kbert.tasks.seq2seq import Seq2SeqTask

        return Seq2SeqTask()
    raise KbertError(f"unknown task {options.task!r}; expected one of {', '.join(TASKS)}")
