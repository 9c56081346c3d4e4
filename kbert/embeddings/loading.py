"""An `Embedder`'s model folders read and written: a sentence-transformers folder (PyLate's and Stanford
ColBERT's too, `kbert.embeddings.folders`) built into Keras, with its task adapters (jina-embeddings-v3) or
bge-m3's heads, and written back from a model's graph.
"""

from __future__ import annotations

import dataclasses
import os
from typing import List, Optional, Sequence

import numpy as np

from kbert.builder import build_transformer_model
from kbert.checkpoints.hf import load_hf_weights, save_hf_weights
from kbert.checkpoints.undrawn import undrawn_weights
from kbert.embeddings import modules as st_modules
from kbert.embeddings.bge_m3 import HEAD_FILES, LexicalOutput, read_head
from kbert.embeddings.folders import SentenceTransformerSpec, read_sentence_transformer, write_pipeline
from kbert.embeddings.inference_free import StaticQuery
from kbert.embeddings.kinds import DenseOutput, OutputKind
from kbert.embeddings.multi_vector import MultiVectorOutput
from kbert.embeddings.precision import RANGES_FILE, load_ranges
from kbert.errors import KbertError
from kbert.io import ModelFolder
from kbert.layers.pooling import L2Normalize, Pooling, SpladePooling
from kbert.layers.task_lora import task_graph
from kbert.models.registry import load_config, resolve
from kbert.tokenizers.tokenizer_json import TokenizerJson, check_tokenizer_fits, folder_tokenizer, save_tokenizer_files

def folder_ranges(folder: str, output: OutputKind, dimensions: int) -> Optional[np.ndarray]:
    """The calibration ranges saved in the model's `folder` (`RANGES_FILE`), checked against its vectors; None
    where there are none. bge-m3's other heads and sparse or multi-vector encoders have no dense vector for them:
    their folder's file is left unread."""
    path = os.path.join(folder, RANGES_FILE)
    if not os.path.isfile(path) or not output.calibrated:
        return None
    return load_ranges(path, dimensions)


def embedder_fields(folder: "str | ModelFolder", source: str, adapter: "str | Sequence[str] | None" = None,
                    head: Optional[str] = None) -> dict:
    """An `Embedder`'s fields read from the sentence-transformers `folder` (`source`: what the user named):
    the backbone built and its weights loaded, the modules after it as one Keras graph, a multi-adapter model's
    graph per adapter (`_task_adapters`), bge-m3's `head` in place of the dense vector (`_with_head`). Each file
    of the folder is read once (a `ModelFolder` passed in keeps what its caller read)."""
    root = ModelFolder.of(folder)
    spec = read_sentence_transformer(root)
    transformer = root.child(os.path.relpath(spec.transformer, root.path))
    config = transformer.file("config.json")
    model_config = load_config(transformer)
    spec, head_weights = _with_head(spec, head, model_config.hidden_size)
    # sentence-transformers' own do_lower_case lower-cases whatever the tokenizer's config says.
    tokenizer = folder_tokenizer(spec.transformer, lower_case_default=spec.do_lower_case, lower_case=spec.do_lower_case)
    if spec.markers:  # a ColBERT folder's [Q] and [D]: one token each, as PyLate (or ColBERT) inserted them
        if not isinstance(tokenizer, TokenizerJson):  # vocab.txt alone, as transformers converts it
            tokenizer = TokenizerJson.from_wordpiece(os.path.join(spec.transformer, "vocab.txt"),
                                                     tokenizer.do_lower_case)
        tokenizer.add_markers(spec.markers)
    check_tokenizer_fits(tokenizer, model_config.vocab_size, spec.transformer)  # before the weights are read
    # Cut to the position table, whatever max_seq_length says: a longer row has no position to take.
    maxlen = min(spec.max_seq_length or model_config.longest_input, model_config.longest_input)
    output = spec.output.within_positions(model_config.longest_input,
                                          os.path.join(spec.transformer, st_modules.TRANSFORMER_SETTINGS))
    adapters, tasks = _task_adapters(transformer, adapter)
    with undrawn_weights():  # the checkpoint's values are read into it, not random ones replaced
        bert = build_transformer_model(model_config, **_mlm_head(output, model_config, config),
                                       task_lora=adapters and adapters.settings(), padding=tokenizer.padding)
    load_hf_weights(bert, transformer, adapter=None if adapters else adapter)
    model = output.build(bert, spec.modules, head_weights)
    static_query = spec.static_query and StaticQuery.load(spec.static_query, int(model.outputs[0].shape[-1]))
    adapter_models = {task: task_graph(model, adapters.tasks.index(task)) for task in tasks}
    adapter = tasks[0] if tasks else adapter
    return dict(model=adapter_models.get(adapter, model), tokenizer=tokenizer, maxlen=maxlen,
                normalize=spec.normalize, source=source, backbone=bert, output=output, prompts=spec.prompts,
                default_prompt_name=spec.default_prompt_name, include_prompt=spec.include_prompt,
                do_lower_case=spec.do_lower_case, static_query=static_query, adapter=adapter,
                adapter_models=adapter_models)


def _task_adapters(folder: ModelFolder, adapter: "str | Sequence[str] | None"):
    """The folder's task adapters (`TaskAdapters`) and the tasks to compute, in order, where `adapter` names
    several (a list; `["all"]`: all the file's), each checked against the file's; `(None, [])` for one name or
    none (merged at load, or the base weights)."""
    from kbert.checkpoints.hf import resolve_safetensors_path
    from kbert.checkpoints.task_adapters import read_adapters
    from kbert.models.config import read_json_object

    if adapter is None or isinstance(adapter, str):
        return None, []
    path = resolve_safetensors_path(folder)
    if "lora_adaptations" not in folder.parsed("config.json", read_json_object):
        raise KbertError(f"adapter {list(adapter)!r}: {folder} holds no task LoRA adapters (its config.json names no "
                         "lora_adaptations); the option chooses among jina-embeddings-v3's")
    adapters = read_adapters(path)
    names = list(adapter)
    if not names or len(set(names)) != len(names) or ("all" in names and len(names) > 1):
        raise KbertError(f"adapter {names!r}: expected task names, each once, or 'all' alone")
    if names == ["all"]:
        return adapters, list(adapters.tasks)
    for name in names:
        adapters.index(name, path)
    return adapters, names


def _with_head(spec: SentenceTransformerSpec, head: Optional[str], hidden_size: int):
    """The folder's pipeline with bge-m3's `head` (`sparse`: `LexicalOutput`; `colbert`: token vectors but the
    first's, normalised) in place of its dense vector, and the head's `Linear` weights; None or `dense`: the
    folder's own, and None."""
    if head in (None, "dense"):
        return spec, None
    if head not in HEAD_FILES:
        raise KbertError(f"head {head!r}: expected dense, sparse or colbert (bge-m3's heads)")
    if spec.output.name != DenseOutput.name:
        raise KbertError(f"head {head}: {spec.transformer} is a {str(spec.output).split()[0]} model already; "
                         "bge-m3's heads sit beside a dense model's folder")
    weights = read_head(spec.transformer, head, hidden_size)
    if head == "sparse":
        return dataclasses.replace(spec, output=LexicalOutput(), modules=[]), weights
    return dataclasses.replace(spec, output=MultiVectorOutput(skip_first=True),
                               modules=[st_modules.Normalize(st_modules.TOKENS)]), weights


def _mlm_head(output: OutputKind, model_config, config_path: str) -> dict:
    """The builder's flags for the transformer an output reads: a sparse encoder's with its masked-LM head
    giving logits (what SPLADE pools), refused for a family without one."""
    if not output.reads_logits:
        return {}
    family = resolve(model_config)[0]
    if "with_mlm" not in family.heads:
        raise KbertError(f"{config_path}: a sparse encoder pools masked-LM logits, and kbert builds no masked-LM "
                         f"head for {family.name}")
    return {"with_mlm": "linear"}


def write_sentence_transformer(folder: str, embedder) -> None:
    """The embedder's files in `folder`: the backbone as Hugging Face weights with its config and tokenizer
    files (`save_tokenizer_files`), then its modules (`write_pipeline`), as its model computes them."""
    modules = _modules(embedder)
    static = embedder.static_query
    if static is not None:  # an inference-free sparse encoder: a Router, its query side a weight table
        query = st_modules.SparseStaticEmbedding("", static.frozen, static.weights)
        modules = [st_modules.Router(query, modules, static.default_route)]
    folders = st_modules.Router.FOLDERS if static else {"document": ""}
    transformer = os.path.join(folder, folders["document"])
    os.makedirs(transformer, exist_ok=True)
    save_hf_weights(embedder.backbone, transformer)
    save_tokenizer_files(embedder.tokenizer, transformer, embedder.maxlen)
    if static is not None:
        save_tokenizer_files(static.tokenizer, os.path.join(folder, folders["query"]),
                             static.max_length or embedder.maxlen)
    write_pipeline(folder, modules, embedder.output, embedder.prompts, embedder.default_prompt_name)


def _modules(embedder) -> List[st_modules.Module]:
    """The embedder's modules: its transformer, then a module for each layer after the backbone, in its model's
    order (`OutputKind.written_modules`: a multi-vector encoder's `MultiVectorMask` where sentence-transformers 6
    puts it)."""
    output = embedder.output
    pooled = output.modules(int(embedder.backbone.outputs[0].shape[-1]), include_prompt=embedder.include_prompt)[0]
    vectors, steps = output.vectors, []
    for layer in embedder.model.layers:
        if isinstance(layer, (Pooling, SpladePooling)):
            steps.append(pooled)
        elif layer.name.startswith("Embedding-Dense-"):
            steps.append(st_modules.Dense.from_layer(layer, vectors))
        elif isinstance(layer, L2Normalize):
            steps.append(st_modules.Normalize(vectors))
    return [output.transformer_module(embedder.maxlen, embedder.do_lower_case),
            *output.written_modules(steps, pooled)]
