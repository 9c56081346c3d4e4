"""Which family builds a model: bert4keras's `model=` names, Hugging Face's `model_type`.

Pure Python: `kbert params` resolves families without importing TensorFlow.
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any, Mapping, Optional, Tuple, Union

from kbert.models.config import BertConfig, read_json_object
from kbert.errors import ConfigError
from kbert.io import ModelFolder

# bert4keras's `model=` name -> "module:class" of the family.
FAMILIES = {
    "bert": "kbert.models.bert.family:BertFamily",
    "roberta": "kbert.models.bert.family:RobertaFamily",
    "albert": "kbert.models.albert.family:AlbertFamily",
    "albert_unshared": "kbert.models.albert.family:AlbertUnsharedFamily",
    "nezha": "kbert.models.nezha.family:NezhaFamily",
    "roformer": "kbert.models.roformer.family:RoformerFamily",
    "electra": "kbert.models.electra.family:ElectraFamily",
    "roformer_v2": "kbert.models.roformer_v2.family:RoformerV2Family",
    "gpt": "kbert.models.gpt.family:GptFamily",
    "gpt2": "kbert.models.gpt.family:Gpt2Family",
    "gpt2_ml": "kbert.models.gpt.family:Gpt2MlFamily",
    "t5": "kbert.models.t5.family:T5Family",
    "t5.1.0": "kbert.models.t5.family:T5Family",
    "t5_encoder": "kbert.models.t5.family:T5EncoderFamily",
    "t5.1.0_encoder": "kbert.models.t5.family:T5EncoderFamily",
    "t5_decoder": "kbert.models.t5.family:T5DecoderFamily",
    "t5.1.0_decoder": "kbert.models.t5.family:T5DecoderFamily",
    "t5.1.1": "kbert.models.t5.family:T511Family",
    "t5.1.1_encoder": "kbert.models.t5.family:T511EncoderFamily",
    "t5.1.1_decoder": "kbert.models.t5.family:T511DecoderFamily",
    "mt5.1.1": "kbert.models.t5.family:Mt5Family",
    "mt5.1.1_encoder": "kbert.models.t5.family:Mt5EncoderFamily",
    "mt5.1.1_decoder": "kbert.models.t5.family:Mt5DecoderFamily",
    "hf_roberta": "kbert.models.hf_roberta.family:HfRobertaFamily",
    "distilbert": "kbert.models.distilbert.family:DistilBertFamily",
    "mpnet": "kbert.models.mpnet.family:MpnetFamily",
    "modernbert": "kbert.models.modernbert.family:ModernBertFamily",
    "deberta_v2": "kbert.models.deberta_v2.family:DebertaV2Family",
    "jina_embeddings_v3": "kbert.models.jina_v3.family:JinaV3Family",
    "gte": "kbert.models.gte.family:GteFamily",
    "nomic_bert": "kbert.models.nomic_bert.family:NomicBertFamily",
    "eurobert": "kbert.models.eurobert.family:EuroBertFamily",
    "llama": "kbert.models.llama.family:LlamaFamily",
    "mistral": "kbert.models.mistral.family:MistralFamily",
    "qwen2": "kbert.models.qwen2.family:Qwen2Family",
    "qwen3": "kbert.models.qwen3.family:Qwen3Family",
    "gemma3_text": "kbert.models.gemma3.family:Gemma3TextFamily",
}
# Families that share another's model_type and are built only when named: ALBERT's configs build albert,
# and a config with model_type "bert" builds BERT (bert4keras's roberta is BERT's layout).
_NAMED_ONLY = ("albert_unshared", "roberta")


@functools.lru_cache(maxsize=None)
def get_family(name: str):
    """The family registered as `name` (`"bert"`, `"albert"`, ...).

    >>> get_family("albert").shared_blocks, get_family("nezha").model_type
    (True, 'nezha')
    """
    if name not in FAMILIES:
        raise ConfigError(f"model={name!r}: kbert builds {', '.join(FAMILIES)}")
    module, attribute = FAMILIES[name].split(":")
    return getattr(importlib.import_module(module), attribute)()



def graph_class(family) -> type:
    """The `TransformerGraph` subclass that builds `family`'s Keras graph (imported when asked for)."""
    module, attribute = family.graph.split(":")
    return getattr(importlib.import_module(module), attribute)

def resolve(config: Union[BertConfig, Mapping[str, Any], "os.PathLike[str]", str],
            model: Optional[str] = None) -> Tuple[Any, BertConfig]:
    """The family and its config object for a config (object, dict, JSON path, or a `ModelFolder`: its
    `config.json`, read once) and `model=`.

    Without `model`, the config's `model_type` (Hugging Face's key, also
    written into kbert's model directories) picks the family; without either,
    BERT. A `model_type` that contradicts `model` is an error naming both.

    >>> family, config = resolve({"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
    ...                          "num_attention_heads": 2, "intermediate_size": 16, "model_type": "nezha"})
    >>> family.name, config.max_relative_position
    ('nezha', 64)
    """
    if isinstance(config, BertConfig):
        family = get_family(_family_name({"model_type": config.model_type}, model, "config")
                            if config.model_type else model or type(config).family)
        if not isinstance(config, family.config_class):
            config = family.config_class.from_dict(config.to_dict())
        return family, config
    if isinstance(config, Mapping):
        values, source = config, "config"
    elif isinstance(config, ModelFolder):
        values, source = config.parsed("config.json", read_json_object), config.file("config.json")
    else:
        source = os.fspath(config)
        values = read_json_object(source)
    family = get_family(_family_name(values, model, source))
    return family, family.config_class.from_dict(values, source=source)


def load_config(config: Union[BertConfig, Mapping[str, Any], "os.PathLike[str]", str]) -> BertConfig:
    """Accepts a `BertConfig`, a dict, the path of a JSON config file, or a `ModelFolder` (its `config.json`).

    The family's own config class is used (e.g. NEZHA's, with
    `max_relative_position`); `resolve` gives the family too.
    """
    return resolve(config)[1]


def _family_name(values: Mapping[str, Any], model: Optional[str], source: str) -> str:
    model_type = model_type_of(values, source)
    if model_type is None:
        return model or "bert"
    # One name per model_type (and its aliases: xlm-roberta is hf_roberta's); "t5" is "t5.1.0"'s alias.
    by_type = {model_type: name for name in FAMILIES if name not in _NAMED_ONLY
               for model_type in (get_family(name).model_type, *get_family(name).model_type_aliases)}
    if model_type not in by_type:
        raise ConfigError(f"{source}: key 'model_type': kbert builds {', '.join(sorted(by_type))}; "
                          f"got {model_type!r}")
    if model is None:
        return by_type[model_type]
    family = get_family(model)
    if model_type not in (_whole_model_type(family.model_type), *family.model_type_aliases):
        difference = get_family(by_type[model_type]).layout_difference or family.layout_difference
        why = f" ({difference})" if difference else ""
        raise ConfigError(f"{source}: key 'model_type' is {model_type!r} but model={model!r} was asked "
                          f"for{why}; pass model={by_type[model_type]!r}, or remove 'model_type' from the config")
    return model


def model_type_of(values: Mapping[str, Any], source: str = "config") -> Optional[str]:
    """The model_type of the model a config describes: its `model_type` key, unless other keys make it
    another's (Hugging Face's T5.1.1 is model_type "t5" with a gated feed-forward; Jina's own
    jina-embeddings-v3 files are xlm-roberta with rotary positions).

    >>> model_type_of({"model_type": "xlm-roberta", "position_embedding_type": "rotary"})
    'jina_embeddings_v3'
    """
    model_type = values.get("model_type") if isinstance(values, Mapping) else None
    if model_type is None:
        return None
    if not isinstance(model_type, str):
        raise ConfigError(f"{source}: key 'model_type': expected a name (a string such as 'bert'), got {model_type!r}")
    if model_type == "t5" and str(values.get("feed_forward_proj", "")).startswith("gated"):
        model_type = "t5.1.1"  # Hugging Face's T5.1.1: model_type "t5" with the gated feed-forward
    position_type = values.get("position_embedding_type", "rope" if model_type == "new" else None)
    return _by_position_type(model_type, position_type, source)


def _by_position_type(model_type: str, position_type: Any, source: str) -> str:
    """The model_type a config's `position_embedding_type` makes of it: the family's that reads such configs
    (its `position_types`); one kbert does not compute (BERT's `relative_key`, `relative_key_query`) is a
    `ConfigError`, not a model silently built with absolute positions."""
    if position_type in (None, "absolute"):
        return model_type
    readers = {(theirs, position): (family.model_type, described) for family in map(get_family, FAMILIES)
               for theirs, position, described in family.position_types}
    if (model_type, position_type) in readers:
        return readers[model_type, position_type][0]
    built = ", and ".join(f"{position!r} with {theirs}: {described}"
                          for (theirs, position), (_, described) in readers.items())
    raise ConfigError(f"{source}: key 'position_embedding_type': {position_type!r} with model_type {model_type!r} "
                      f"is not a model kbert builds (it builds 'absolute' positions, {built})")


def _whole_model_type(model_type: str) -> str:
    """The model_type of the whole model a stack alone belongs to (`t5.1.1_encoder` -> `t5.1.1`): a
    stack reads its model's config."""
    for suffix in ("_encoder", "_decoder"):
        if model_type.endswith(suffix):
            return model_type[:-len(suffix)]
    return model_type
