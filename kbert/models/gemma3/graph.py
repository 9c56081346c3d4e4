"""Gemma 3's text model's Keras graph.

    Input-Token, Input-Segment (taken, not read)
    Embedding-Token, Embedding-Scale (times √H)
    Transformer-{i}-MultiHeadSelfAttention-Norm, Transformer-{i}-MultiHeadSelfAttention,
        Transformer-{i}-MultiHeadSelfAttention-Output-Norm, Transformer-{i}-MultiHeadSelfAttention-Add
    Transformer-{i}-FeedForward-Norm, Transformer-{i}-FeedForward, Transformer-{i}-FeedForward-Output-Norm,
        Transformer-{i}-FeedForward-Add
    Output-Norm
    heads: LM-Output (or the tied token table), LM-Softcap where final_logit_softcapping, MLM-Activation
"""

from __future__ import annotations

import math
from typing import Optional

import keras

from kbert.layers import GatedFeedForward, LogitSoftCap, RMSNormalization, RotarySelfAttention, Scale, get_activation
from kbert.models import naming
from kbert.models.gemma3.family import OUTPUT_NORM
from kbert.models.llama.graph import LlamaGraph

EMBEDDING_SCALE = "Embedding-Scale"
LM_SOFTCAP = "LM-Softcap"


class Gemma3Graph(LlamaGraph):
    """Llama's decoder graph with Gemma's changes: RMS norms times `1 + w` (`RMSNormalization(unit_offset=True)`),
    also on each sublayer's output; the token vectors times √H; the scores scaled by `query_pre_attn_scalar`;
    each block's rotary base and window by its layer type (`Gemma3Config.rope_of`, `window_of`: a bidirectional
    model's sliding layers see the keys within a distance either side)."""

    def apply_embeddings(self, inputs):
        # the factor rounded to the compute dtype, as transformers' (√768 is 27.75 in bfloat16)
        return self.apply(super().apply_embeddings(inputs), Scale, EMBEDDING_SCALE,
                          factor=math.sqrt(self.config.hidden_size))

    def apply_norm(self, x, name: str):
        return self.apply(x, RMSNormalization, name, epsilon=self.config.layer_norm_eps, unit_offset=True)

    def apply_main_layers(self, x, index: Optional[int]):
        config = self.config
        name = naming.block(index, naming.ATTENTION)
        attended = self.apply(self.apply_norm(x, f"{name}-Norm"), RotarySelfAttention, name,
                              **self.attention_settings(index))
        attended = self.apply_norm(attended, f"{name}-{OUTPUT_NORM}")
        x = self.apply([x, attended], keras.layers.Add, f"{name}-Add")
        name = naming.block(index, naming.FEED_FORWARD)
        fed = self.apply(self.apply_norm(x, f"{name}-Norm"), GatedFeedForward, name, fused=False,
                         intermediate_size=config.intermediate_size, activation=get_activation(config.activation),
                         use_bias=False, kernel_initializer=self.initializer())
        fed = self.apply_norm(fed, f"{name}-{OUTPUT_NORM}")
        return self.apply([x, fed], keras.layers.Add, f"{name}-Add")

    def attention_settings(self, index: Optional[int]) -> dict:
        config = self.config
        theta, factor, scaled = config.rope_of(index or 0)
        window = config.window_of(index or 0)
        causal = not config.use_bidirectional_attention
        return {**super().attention_settings(index), "rope_theta": theta, "rope_factor": factor or 1.0,
                "rope_scaling": scaled, "causal_window": window if causal else None,
                "window": None if causal else window, "qk_norm_unit_offset": True,
                "attention_scale": config.query_pre_attn_scalar ** -0.5}

    def lm_logits(self, x):
        cap = self.config.final_logit_softcapping
        x = super().lm_logits(x)
        return x if cap is None else self.apply(x, LogitSoftCap, LM_SOFTCAP, cap=cap)
