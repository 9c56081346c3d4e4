"""What a model holds, explained: analytic parameter counts and the summaries that check them.

- `params`: every layer's count from the config with its formula
  (`analyze`), wrong totals explained (`explain_claim`), FLOPs per token.
  Pure Python: `kbert params` never imports TensorFlow.
- `summary`: the table, cross-checked ✓/✗ against a built model (`crosscheck`).
- `keras2`: a model's summary in Keras 2's text layout (bert4keras's tables).
"""
