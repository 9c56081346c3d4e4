"""Llama's Keras graph, and that of the decoders built like it (Qwen2, Qwen3, Mistral).

    Input-Token, Input-Segment (taken, not read)
    Embedding-Token
    Transformer-{i}-MultiHeadSelfAttention-Norm, Transformer-{i}-MultiHeadSelfAttention[-Add]
    Transformer-{i}-FeedForward-Norm, Transformer-{i}-FeedForward[-Add]
    Output-Norm
    heads: LM-Output (or the tied token table), MLM-Activation
"""

from __future__ import annotations

from typing import Optional

from kbert.models.eurobert.graph import EuroBertGraph
from kbert.models.llama.family import LM_OUTPUT


class LlamaGraph(EuroBertGraph):
    """EuroBERT's pre-norm blocks (RMS norms, a SiLU `GatedFeedForward`) with a decoder's attention: causal unless
    the config says `use_bidirectional_attention`, heads of `head_dim` features, sliding windows, llama3 or yarn
    rotary frequencies, and the config class's biases and query and key norms.

    A position is hidden because its text ended (the builder's `padding`: a tokenizer's negative ids), never
    because of its id: these tokenizers pad with the token that ends every text (Qwen's `<|endoftext|>`), so
    the config's `pad_token_id` hides nothing."""

    output_layer = LM_OUTPUT

    def token_padding(self) -> dict:
        return {} if self.padding is None else super().token_padding()

    def attention_settings(self, index: Optional[int]) -> dict:
        config = self.config
        causal = not config.use_bidirectional_attention
        return {**super().attention_settings(index), "rope_scaling": config.scaled_rope,
                "output_bias": config.output_bias, "causal": causal,
                "causal_window": config.window_of(index or 0) if causal else None,
                "qk_norm_epsilon": config.layer_norm_eps if config.qk_norm else None}

    def lm_bias(self) -> bool:
        return False  # lm_head has none, whatever mlp_bias says
