"""Serializable Keras 3 layers that BERT-family models and their heads need beyond Keras's own.

Each layer has a `get_config` and is registered under the `kbert` package, so
a model saved as `.keras` loads back with `safe_mode=True`. None of them knows
BERT's layer names: the model builders give the names.

- `embeddings`: `Embedding`, `TokenEmbedding`, `PositionEmbedding` (`RobertaPositionEmbedding`), `MaskedAdd`
- `attention`: `MultiHeadSelfAttention`
- `feed_forward`: `FeedForward`, `GatedFeedForward` (GeGLU, SwiGLU)
- `norms`: `RMSNormalization` (T5, RoFormer-v2), `ConditionalLayerNormalization` (`layer_norm_cond`)
- `heads`: `TakeToken`, `TakePositions`, `BiasAdd`, `Scale`, `LogitSoftCap`, `TokenScore`
- `crf`: `ConditionalRandomField`, `ViterbiDecoder`, `viterbi_decode`
- `memm`: `MaximumEntropyMarkovModel` (bert4keras's bidirectional MEMM)
- `pointer`: `GlobalPointer`, `EfficientGlobalPointer`
- `pooling`: `Pooling` (cls, mean, max, mean_sqrt_len, lasttoken), `L2Normalize`: sentence embeddings;
  `SpladePooling`: SPLADE's sparse term weights from masked-LM logits; `TermWeights`: a weight table's sparse
  vector of a text's ids (an inference-free sparse encoder's queries)
- `views`: `StackViews`, `SplitViews`: an example's several texts through one encoder call (contrastive training)
- `masks`: `AttentionMask` (the `lm` and `unilm` applications), `UnmaskingDropout` (Hugging Face's T5 decoder),
  `ZeroingDropout` (DeBERTa's embeddings, zero where hidden)
- `positions`: `SinusoidalPositionEmbedding` (RoFormer), `RelativePositionEmbedding`
  and its `Sinusoidal` initializer (NEZHA), `T5RelativePositionBias` and `t5_buckets` (T5)
- `rotary`: `sinusoidal_positions`, `apply_rotary`
- `disentangled`: `DisentangledSelfAttention`, `RelativePositionTable`, `log_buckets` (DeBERTa-v2/v3)
- `rotary_attention`: `RotarySelfAttention` (half-split RoPE, fused projections, sliding windows block by
  block: ModernBERT), `windowed_attention`
- `task_lora`: `TaskLoRADense`, and the task LoRA pairs an `Embedding`, `FeedForward` or
  `RotarySelfAttention` holds beside its weights (`task_lora=`; Jina-v3's adapters, chosen by `task=`)
- `decoding`: `DecodingStep`, what a step of cached decoding gives the layers' `call_step`
- `common`: `gelu_tanh`, `get_activation`, `clone_initializer`, `DepthScaledTruncatedNormal`
  (RoFormer-v2)
"""

from kbert.layers.attention import MultiHeadSelfAttention
from kbert.layers.common import DepthScaledTruncatedNormal, clone_initializer, gelu_tanh, get_activation
from kbert.layers.crf import ConditionalRandomField, ViterbiDecoder, viterbi_decode
from kbert.layers.disentangled import DisentangledSelfAttention, RelativePositionTable, log_buckets
from kbert.layers.embeddings import (Embedding, MaskedAdd, PositionEmbedding, RobertaPositionEmbedding, TokenEmbedding,
                                     checked_ids)
from kbert.layers.feed_forward import FeedForward, GatedFeedForward
from kbert.layers.heads import BiasAdd, LogitSoftCap, Scale, TakePositions, TakeToken, TokenScore
from kbert.layers.norms import ConditionalLayerNormalization, RMSNormalization
from kbert.layers.memm import MaximumEntropyMarkovModel
from kbert.layers.pointer import EfficientGlobalPointer, GlobalPointer
from kbert.layers.pooling import POOLING_MODES, L2Normalize, Pooling, SpladePooling, TermWeights
from kbert.layers.rotary_attention import RotarySelfAttention, apply_rotary_half, rotary_cos_sin, windowed_attention
from kbert.layers.masks import AttentionMask, UnmaskingDropout, ZeroingDropout
from kbert.layers.positions import (RelativePositionEmbedding, Sinusoidal, SinusoidalPositionEmbedding,
                                   T5RelativePositionBias, t5_buckets)
from kbert.layers.rotary import apply_rotary, sinusoidal_positions
from kbert.layers.task_lora import TaskLoRADense
from kbert.layers.views import SplitViews, StackViews

__all__ = ["AttentionMask", "TaskLoRADense", "BiasAdd", "L2Normalize", "POOLING_MODES", "Pooling", "SpladePooling", "SplitViews",
           "StackViews", "TermWeights",
           "ConditionalLayerNormalization", "ConditionalRandomField",
           "DepthScaledTruncatedNormal", "DisentangledSelfAttention", "RelativePositionTable", "log_buckets",
           "EfficientGlobalPointer", "Embedding", "FeedForward", "GatedFeedForward", "GlobalPointer", "MaskedAdd", "MaximumEntropyMarkovModel",
           "MultiHeadSelfAttention", "RotarySelfAttention", "apply_rotary_half", "rotary_cos_sin", "windowed_attention",
           "PositionEmbedding", "RMSNormalization", "RelativePositionEmbedding", "RobertaPositionEmbedding", "Scale",
           "LogitSoftCap", "TokenScore",
           "Sinusoidal",
           "SinusoidalPositionEmbedding", "T5RelativePositionBias", "TakePositions", "TakeToken", "TokenEmbedding", "UnmaskingDropout", "ViterbiDecoder",
           "ZeroingDropout",
           "apply_rotary", "checked_ids", "clone_initializer", "gelu_tanh", "get_activation", "sinusoidal_positions",
           "t5_buckets", "viterbi_decode"]
