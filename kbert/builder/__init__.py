"""Builds models and loads their weights: the backbone, the task heads, conversions between formats.

- `backbone`: `build_transformer_model` (bert4keras's signature), which builds
  a family's graph and loads its checkpoint.
- `heads`: `build_classifier`, `build_token_classifier`, `build_masked_lm` (pre-training).
- `convert`: a weights file in the other format (builds the model it holds).
"""

from kbert.builder.backbone import build_transformer_model
from kbert.builder.heads import build_classifier, build_masked_lm, build_token_classifier
from kbert.models.transformer import IdModel, Transformer

__all__ = ["IdModel", "Transformer", "build_classifier", "build_masked_lm", "build_token_classifier", "build_transformer_model"]
