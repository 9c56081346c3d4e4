"""Qwen2's names and formulas (`model="qwen2"`): Llama's, with its config class (`Qwen2Config`). Pure Python."""

from kbert.models.llama.family import LlamaFamily
from kbert.models.qwen2.config import Qwen2Config


class Qwen2Family(LlamaFamily):
    """Qwen2 as transformers builds it (`Qwen2Model`, `Qwen2ForCausalLM`): Llama's layout, biases on `q_proj`,
    `k_proj` and `v_proj`, sliding layers where `use_sliding_window`.

    Example:
    >>> Qwen2Family().hf_architecture(__import__("kbert").models.heads.Heads(mlm="softmax"))
    'Qwen2ForCausalLM'
    """

    name = model_type = "qwen2"
    released_by = "Qwen2"
    config_class = Qwen2Config
    hf_class = "Qwen2"
