"""The model families kbert builds, on one skeleton.

- `registry`: bert4keras's `model=` names and Hugging Face's `model_type` -> family.
- `transformer`: the skeleton every family's graph fills in (bert4keras's
  template: embeddings, then the blocks, then the heads, with one hook each).
- one sub-package per family (`bert`, `albert`, `nezha`, `roformer`, `electra`):
  `family.py` holds what needs no TensorFlow (config class, checkpoint
  variable names, parameter formulas), `graph.py` the Keras graph.

Adding a family is one sub-package and one line in `registry.FAMILIES`.
"""
