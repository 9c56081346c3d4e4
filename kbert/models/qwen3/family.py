"""Qwen3's names and formulas (`model="qwen3"`): Llama's, with its config class (`Qwen3Config`). Pure Python."""

from kbert.models.llama.family import LlamaFamily
from kbert.models.qwen3.config import Qwen3Config


class Qwen3Family(LlamaFamily):
    """Qwen3 as transformers builds it (`Qwen3Model`, `Qwen3ForCausalLM`): Llama's layout with `q_norm` and `k_norm`
    on each head's queries and keys, heads of `head_dim` (default 128) features.

    Example:
    >>> family = Qwen3Family()
    >>> config = family.config_class.from_dict({"vocab_size": 151669, "hidden_size": 1024, "num_hidden_layers": 28,
    ...     "num_attention_heads": 16, "num_key_value_heads": 8, "intermediate_size": 3072,
    ...     "tie_word_embeddings": True})
    >>> sum(row.params for row in family.layer_params(config))  # Qwen3-Embedding-0.6B
    595776512
    """

    name = model_type = "qwen3"
    released_by = "Qwen3"
    config_class = Qwen3Config
    hf_class = "Qwen3"
