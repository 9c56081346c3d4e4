"""The model families kbert builds, on one skeleton, and what describes them without TensorFlow.

- `config`: `BertConfig` (read, validate, defaults; a family's config class extends it).
- `naming`: the bert4keras layer names, defined once.
- `tables`: the rows every family writes: checkpoint names (`WeightName`) and
  parameter counts with formulas (`LayerParams`).
- `heads`: the heads a model can carry (`Heads`, a tagger's `TOKEN_HEADS`).
- `registry`: bert4keras's `model=` names and Hugging Face's `model_type` -> family.
- `transformer`: the skeleton every family's graph fills in (bert4keras's
  template: embeddings, then the blocks, then the heads, with one hook each).
- one sub-package per family (`bert`, `albert`, `nezha`, `roformer`, `electra`):
  `family.py` holds what needs no TensorFlow (config class, checkpoint
  variable names, parameter formulas), `graph.py` the Keras graph.

Only `transformer` and the `graph.py` modules import Keras.

Adding a family is one sub-package and one line in `registry.FAMILIES`.
"""
