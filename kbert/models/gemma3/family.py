"""Gemma 3's text model: checkpoint names and parameter formulas (`model="gemma3_text"`).

Pure Python (no TensorFlow). The Keras graph is in `graph.py`.
"""

from __future__ import annotations

import re
from typing import List, Optional

from kbert.models import naming
from kbert.models.gemma3.config import Gemma3Config
from kbert.models.heads import Heads
from kbert.models.llama.family import LM_OUTPUT, LlamaFamily, _rms_norm
from kbert.models.tables import LayerParams, WeightName

# The norm on a sublayer's output, before its residual sum (Gemma's post_attention and post_feedforward norms).
OUTPUT_NORM = "Output-Norm"
_OUTPUT_NORM = re.compile(rf"Transformer-(\d+)-({naming.ATTENTION}|{naming.FEED_FORWARD})-{OUTPUT_NORM}")
# transformers' names of a block's four norms: (sublayer, on its output) -> name
NORMS = {(naming.ATTENTION, False): "input_layernorm", (naming.ATTENTION, True): "post_attention_layernorm",
         (naming.FEED_FORWARD, False): "pre_feedforward_layernorm",
         (naming.FEED_FORWARD, True): "post_feedforward_layernorm"}


class Gemma3TextFamily(LlamaFamily):
    """Gemma 3's text model as transformers builds it (`Gemma3TextModel`, `Gemma3ForCausalLM`); a config with
    `model_type` gemma3_text gets it (EmbeddingGemma).

    Llama's layout with four RMS norms a block (`input_layernorm` and `pre_feedforward_layernorm` before the
    sublayers, `post_attention_layernorm` and `post_feedforward_layernorm` on their outputs, before the residual
    sums), each multiplying by `1 + w`; `q_norm` and `k_norm` on each head's queries and keys; the token table's
    vectors times √H; a tanh-GELU GLU; the LM head the token table (tied, as released) or `lm_head`.

    Example:
    >>> family = Gemma3TextFamily()
    >>> config = family.config_class.from_dict({"vocab_size": 262144, "hidden_size": 768, "num_hidden_layers": 24,
    ...     "num_attention_heads": 3, "num_key_value_heads": 1, "intermediate_size": 1152, "head_dim": 256})
    >>> sum(row.params for row in family.layer_params(config))  # EmbeddingGemma-300m's backbone
    302863104
    """

    name = model_type = "gemma3_text"
    released_by = "Gemma 3"
    config_class = Gemma3Config
    graph = "kbert.models.gemma3.graph:Gemma3Graph"
    hf_class = "Gemma3"

    def hf_architecture(self, heads: Heads) -> str:
        return "Gemma3ForCausalLM" if heads.mlm else "Gemma3TextModel"

    embedding_note = "times √H"

    def block_params(self, index: int, attention: tuple, mlp: tuple, h: int) -> List[LayerParams]:
        rows = super().block_params(index, attention, mlp, h)
        outputs = [LayerParams(naming.block(index, sublayer, OUTPUT_NORM), "encoder", "H", h, "on the sublayer's output")
                   for sublayer in (naming.ATTENTION, naming.FEED_FORWARD)]
        return rows[:2] + outputs[:1] + rows[2:] + outputs[1:]

    def weight_layers(self, num_blocks: int) -> List[str]:
        layers = [naming.EMBEDDING_TOKEN]
        for index in range(num_blocks):
            layers += [naming.block(index, sublayer, suffix) for sublayer in (naming.ATTENTION, naming.FEED_FORWARD)
                       for suffix in ("Norm", "", OUTPUT_NORM)]
        return layers + [naming.OUTPUT_NORM, LM_OUTPUT]

    def layer_weights(self, layer: str) -> List[WeightName]:
        match = _OUTPUT_NORM.fullmatch(layer)
        if match is None:
            return super().layer_weights(layer)
        return _rms_norm(layer, f"layers.{match.group(1)}.{NORMS[match.group(2), True]}")

    def block_weights(self, layer: str, index: Optional[int], sublayer: str, is_norm: bool) -> List[WeightName]:
        if is_norm:
            return _rms_norm(layer, f"layers.{index or 0}.{NORMS[sublayer, False]}")
        return super().block_weights(layer, index, sublayer, is_norm)  # Llama's projections and q/k norms
