"""Mistral's names and formulas (`model="mistral"`): Llama's, with its config class (`MistralConfig`). Pure
Python."""

from kbert.models.llama.family import LlamaFamily
from kbert.models.mistral.config import MistralConfig


class MistralFamily(LlamaFamily):
    """Mistral as transformers builds it (`MistralModel`, `MistralForCausalLM`): Llama's layout without biases,
    every block's attention within `sliding_window` keys.

    Example:
    >>> family = MistralFamily()
    >>> config = family.config_class.from_dict({"vocab_size": 32000, "hidden_size": 4096, "num_hidden_layers": 32,
    ...     "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336})
    >>> sum(row.params for row in family.layer_params(config))  # e5-mistral-7b-instruct
    7110660096
    """

    name = model_type = "mistral"
    released_by = "Mistral"
    config_class = MistralConfig
    hf_class = "Mistral"
