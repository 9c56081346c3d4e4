"""The fine-tuning run, the same for every task, and what it is made of.

- `task`: what the run asks of a task (`Task`, `TrainingData`); the tasks
  themselves are in `kbert.tasks`, above this wing.
- `loop`: `train_task`: checks, the model, Keras's `fit`, the kept epoch, Ctrl-C.
- `run_directory`: `OUT.partial/`, `--resume`, `--overwrite`.
- `model_dir`: the model directory a run writes, and `load_model`.
- `options`: `TrainingOptions` (no TensorFlow, for `--help`).
- `data`: data files and label maps.
- `pipeline`: padded batches with length bucketing (`tf.data` on TensorFlow, a `PyDataset` elsewhere).
- `batches`: bert4keras's `sequence_padding` and `DataGenerator`.
- `optimizers`: `make_optimizer` (AdamW, LAMB or Adafactor, with sparse gradients summed first on TensorFlow).
- `schedules`: learning-rate schedules.
- `distribute`: `--strategy` and the multi-worker `Trainer`.
- `precision`: `--mixed-precision`.
- `losses`: multilabel categorical cross-entropy, GlobalPointer's loss.
- `metrics`: precision, recall and F1 from counts.
- `saving`: `load_keras_model`.
"""
