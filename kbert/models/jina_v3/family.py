"""Jina-embeddings-v3's checkpoint names and parameter formulas (`model="jina_embeddings_v3"`): the rotary post-norm
skeleton (`kbert.models.rotary_bert`) on Hugging Face's XLM-R.

Pure Python (no TensorFlow). The graph is the skeleton's (`kbert.models.rotary_bert.graph`).
"""

from __future__ import annotations

from kbert.models.hf_roberta.family import HfRobertaFamily
from kbert.models.jina_v3.config import JinaV3Config
from kbert.models.rotary_bert.family import RotaryBertFamily


class JinaV3Family(RotaryBertFamily, HfRobertaFamily):
    """Jina-embeddings-v3 as transformers builds it (`JinaEmbeddingsV3Model`, `...ForMaskedLM`,
    `...ForSequenceClassification`); a config with `model_type` jina_embeddings_v3 gets it.

    XLM-R (Hugging Face's RoBERTa: `<pad>` id 1, the pooler, the `roberta.` and `lm_head.` scopes, the
    classification head) with rotary positions instead of a position table (`RotaryBertFamily`) and BERT's
    feed-forward; its files' names are Jina's own (`emb_ln`, `encoder.layers.{i}.mixer.Wqkv`, `norm1`). Jina's own
    config.json (model_type xlm-roberta, `position_embedding_type` rotary) builds it too, and its files' task LoRA
    adapters are merged in at load, the task chosen by name (`kbert.checkpoints.task_adapters`); kbert writes
    transformers 5's layout, one set of weights.

    Example:
    >>> family = JinaV3Family()
    >>> config = family.config_class.from_dict({"vocab_size": 250002, "hidden_size": 1024,
    ...     "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096})
    >>> sum(row.params for row in family.layer_params(config, with_pool=True))  # jina-embeddings-v3's backbone
    559364096
    """

    name = "jina_embeddings_v3"
    config_class = JinaV3Config
    released_by, released_for = "Jina-embeddings-v3", "transformers"
    model_type = "jina_embeddings_v3"
    model_type_aliases = ()
    # Jina's own files: model_type xlm-roberta, rotary positions from its remote code.
    position_types = (("xlm-roberta", "rotary", "Jina's jina-embeddings-v3"),)
    hf_class = "JinaEmbeddingsV3"
    layout_difference = None
    positions_after_padding = False
    task_lora_layers = True
    mlm_activation = "gelu"  # XLMRobertaLMHead's, whatever hidden_act says
