"""Rerankers (cross-encoders): a query and a passage read together, one relevance score per pair.

`kbert train --task rerank` reads `query<TAB>passage<TAB>label` (a label of 0 or 1, or a relevance
between 0 and 1) and trains BERT's pooled `[CLS]` with one output (`dense_output`), its sigmoid the
score, on binary cross-entropy (pointwise). The model directory is also a sentence-transformers
`CrossEncoder` folder (Hugging Face's `BertForSequenceClassification` with one label), and
`Reranker.load` reads such folders, kbert's or the hub's, and sentence-transformers 6's CrossEncoder folders on a
causal LM (Qwen3-Reranker's: a `LogitScore` of the LM's logits of "yes" and "no" at the last token, each pair
rendered by the folder's chat template: `kbert.tokenizers.chat_template`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import keras
import numpy as np

from kbert.builder import build_transformer_model
from kbert.checkpoints.undrawn import initialize_undrawn, undrawn_weights
from kbert.embeddings.files import model_max_length
from kbert.errors import DataError, KbertError
from kbert.io import ModelFolder
from kbert.layers.common import get_activation
from kbert.layers.heads import TakeToken
from kbert.layers.pooling import Pooling
from kbert.tokenizers.tokenizer_json import check_tokenizer_fits, folder_tokenizer, save_tokenizer_files
from kbert.models import naming
from kbert.models.heads import SequenceHead
from kbert.models.config import read_json_object
from kbert.models.registry import FAMILIES, get_family, graph_class, resolve
from kbert.models.transformer import built_config, id_model
from kbert.training.data import LabelMap, check_known_tokens
from kbert.training.contrastive import ListwiseSoftmaxLoss
from kbert.training.pipeline import batches_by_length, make_dataset
from kbert.training.records import Fields, parse_rows, read_records
from kbert.training.task import Task, TrainingData, read_training_file

RERANKER_SCORE = "Reranker-Score"  # a causal LM reranker's logit(yes) − logit(no)
PAIR_FIELDS = Fields({"query": ("query", "text", "question", "sentence1"),
                      "passage": ("passage", "text_b", "document", "answer", "sentence2"),
                      "label": ("label", "score", "relevance")},
                     ("query", "passage", "label"), {3: ("query", "passage", "label")})


@dataclasses.dataclass(frozen=True)
class JudgedPair:
    """A query, a passage and how relevant it is (0 to 1)."""

    query: str
    passage: str
    label: float
    line: int


def read_judged_pairs(path: str, *, skip_malformed: bool = False, columns=None):
    """`query<TAB>passage<TAB>label` rows (a header may name them), each label a number from 0 to 1."""
    rows, layout, _ = read_records(path, PAIR_FIELDS, columns)
    return parse_rows(path, rows, _judged_pair, skip_malformed, "no query-passage pairs", layout)


def _judged_pair(row: dict, line: int) -> JudgedPair:
    for name in ("query", "passage"):
        if not isinstance(row.get(name), str) or not row[name].strip():
            raise ValueError(f"empty or missing {name}")
    try:
        label = float(row["label"])
    except (TypeError, ValueError):
        raise ValueError(f"the label {row.get('label')!r} is not a number (0: not relevant, 1: relevant)") from None
    if not 0 <= label <= 1:
        raise ValueError(f"the label {label:g} is outside 0 to 1 (0: not relevant, 1: relevant)")
    return JudgedPair(row["query"], row["passage"], label, line)


def listwise_groups(pairs: Sequence[JudgedPair], group_size: int, seed: int = 0) -> List[List[JudgedPair]]:
    """Each query's group for listwise training: its most relevant passage first, then `group_size - 1` of
    its other passages (drawn without repeats while there are enough, with repeats when fewer), in a
    seeded order of queries. Queries with no relevant passage (label > 0) or no other passage are left out.

    Example:
    >>> pairs = [JudgedPair("q", "a", 1.0, 1), JudgedPair("q", "b", 0.0, 2), JudgedPair("r", "c", 0.0, 3)]
    >>> [[pair.passage for pair in group] for group in listwise_groups(pairs, 3)]
    [['a', 'b', 'b']]
    """
    rng = np.random.default_rng(seed)
    by_query: Dict[str, List[JudgedPair]] = {}
    for pair in pairs:
        by_query.setdefault(pair.query, []).append(pair)
    groups = []
    for members in by_query.values():
        best = max(members, key=lambda pair: pair.label)
        others = [pair for pair in members if pair is not best]
        if best.label <= 0 or not others:
            continue
        picks = rng.choice(len(others), size=group_size - 1, replace=len(others) < group_size - 1)
        groups.append([best] + [others[index] for index in picks])
    return [groups[index] for index in rng.permutation(len(groups))]


def ranking_of(pairs: Sequence[JudgedPair], logits: np.ndarray) -> Dict[str, float]:
    """nDCG@10 and MRR@10 (means over the queries with a relevant passage) of each query's passages ranked
    by their logits, as MTEB's reranking tasks score."""
    from kbert.embeddings.ranking_metrics import ranking_scores

    groups: Dict[str, List[int]] = {}
    for index, pair in enumerate(pairs):
        groups.setdefault(pair.query, []).append(index)
    scores: Dict[str, List[float]] = {"ndcg@10": [], "mrr@10": []}
    for members in groups.values():
        if not any(pairs[index].label > 0 for index in members):
            continue
        ranked = sorted(members, key=lambda index: -logits[index])
        judged = {str(index): pairs[index].label for index in members}
        for name, value in ranking_scores([pairs[index].label for index in ranked], judged).items():
            if name in scores:
                scores[name].append(value)
    return {name: float(np.mean(values)) if values else 0.0 for name, values in scores.items()}


def reranker_model(bert: keras.Model, name: str = "reranker") -> keras.Model:
    """`bert`'s `[CLS]` through BERT's pooler (`Pooler`, `Pooler-Dense`, tanh) to one output, the relevance logit:
    the layout of Hugging Face's `BertForSequenceClassification` with one label (`dense_output` is its
    `classifier`). The pooler is added here, not by the builder, so that a checkpoint without one (kbert
    pretrain's, most MLM checkpoints) still loads; it then starts from random weights, as the head does.
    Each family says its own head (`family.sequence_head`): for Hugging Face's RoBERTa (`hf_roberta`) the tanh
    dense is its classification head's own (`Classifier-Hidden`: `RobertaForSequenceClassification`'s
    `classifier.dense`, then `out_proj`); for DistilBERT, its `pre_classifier` with ReLU, then `classifier`; for
    ModernBERT, its `classifier_pooling` (the first token or the real tokens' mean), then a dense, GELU and
    LayerNorm (`head.dense`, `head.norm`), then `classifier`; EuroBERT's late pooling averages every token's
    dense and GELU; a decoder's (`LlamaForSequenceClassification`, Qwen3's, ...) takes the last real token to its
    `score`, with no dense before it and no bias."""
    initializer = keras.initializers.TruncatedNormal(stddev=0.02)
    family = get_family(bert.family)
    config = built_config(bert, family)  # None: a model built by hand, given BERT's head
    head = (family.sequence_head(config) if config is not None
            else SequenceHead(activation=family.classifier_activation))
    dense = keras.layers.Dense(bert.output.shape[-1], activation=get_activation(head.activation),
                               use_bias=head.bias, kernel_initializer=initializer, name=family.classifier_hidden)
    if head.pooling == "late":  # every token's dense, then their mean (Dense keeps the padding mask)
        hidden = Pooling("mean", name=naming.POOLER)(dense(bert.output))
    else:
        hidden = (TakeToken(0, name=naming.POOLER) if head.pooling == "cls"
                  else Pooling(head.pooling, name=naming.POOLER))(bert.output)
        hidden = dense(hidden) if head.hidden else hidden
    if head.norm_epsilon is not None:
        hidden = keras.layers.LayerNormalization(epsilon=head.norm_epsilon, center=head.norm_bias,
                                                 name=naming.CLASSIFIER_NORM)(hidden)
    logit = keras.layers.Dense(1, use_bias=head.output_bias, kernel_initializer=initializer,
                               name=naming.CLASSIFIER_DENSE, dtype="float32")(hidden)
    return id_model(bert.inputs, logit, getattr(bert, "family", "bert"), name)  # the family names its weights


def causal_reranker_model(bert: keras.Model, score, name: str = "reranker") -> keras.Model:
    """A causal LM's relevance logit (sentence-transformers' `LogitScore`, `score`): its LM head on the last real
    token's hidden state (`Pooling` lasttoken: the padding after a text is hidden because it ended), the tied token
    table or `LM-Output` (`lm_head`), soft-capped where the config says (Gemma), then the true token's logit minus
    the false one's (`TokenScore`). The head is the model's own, so training moves the LM head that
    sentence-transformers reads back."""
    from kbert.layers import TokenScore

    family = get_family(bert.family)
    hidden = Pooling("lasttoken", name=naming.POOLER)(bert.output)
    logits = graph_class(family).from_model(bert, family).lm_logits(hidden)  # the graph's own LM head, by name
    logit = TokenScore(score.true_token_id, score.false_token_id, name=RERANKER_SCORE, dtype="float32")(logits)
    return id_model(bert.inputs, logit, bert.family, name)


def default_score(folder: ModelFolder, tokenizer):
    """What sentence-transformers scores a bare causal LM with: a `LogitScore` of its tokens "yes" and "no"."""
    from kbert.embeddings.modules import LogitScore

    ids = [tokenizer.token_to_id(token) for token in ("yes", "no")]
    if None in ids:
        raise KbertError(f"{folder}: no modules.json with a LogitScore, and its tokenizer has no 'yes' and 'no' "
                         "tokens, which a causal LM's CrossEncoder scores by default")
    return LogitScore(*ids)


def chat_pairs(folder: ModelFolder, tokenizer):
    """The pairs a causal CrossEncoder reads (`ChatPairs`), as sentence-transformers 6 lays them out: through the
    folder's chat template where its Transformer takes messages (`modality_config` names `message`; a folder with
    no such settings, a bare causal LM's, where it has a template), else by the tokenizer's pair encoding; its
    default prompt (`config_sentence_transformers.json`) before them."""
    from kbert.embeddings.folders import settings
    from kbert.embeddings.modules import TRANSFORMER_SETTINGS
    from kbert.tokenizers.chat_template import SPECIAL_TOKENS, ChatPairs, ChatTemplate, read_chat_template
    from kbert.tokenizers.tokenizer_json import tokenizer_settings

    token_settings = tokenizer_settings(folder)
    found = read_chat_template(folder.path, token_settings)
    if folder.has(TRANSFORMER_SETTINGS):  # sentence-transformers reads what its settings list, or text alone
        modalities = folder.parsed(TRANSFORMER_SETTINGS, read_json_object).get("modality_config") or {}
        found = found if "message" in modalities else None
    special = {key: value["content"] if isinstance(value, dict) else value
               for key, value in token_settings.items() if key in SPECIAL_TOKENS}
    folder_settings = settings(folder)
    prompts = folder_settings.get("prompts") or {}
    prompt = prompts.get(folder_settings.get("default_prompt_name")) if isinstance(prompts, dict) else None
    return ChatPairs(tokenizer, found and ChatTemplate(*found, special), prompt or None)


@dataclasses.dataclass
class Reranker:
    """A loaded cross-encoder: `score(query, passages)` gives each passage's relevance (0 to 1).

    Args:
        model: from token and segment ids of `[CLS] query [SEP] passage [SEP]` to the relevance logit.
        tokenizer: its tokenizer (`tokenizer.json` where the folder has one, else `vocab.txt`).
        maxlen: the longest pair in tokens (longer ones are cut, the longer text first).
        source: where it was loaded from.
        activation: what turns a logit into the score: `sigmoid` (0 to 1), or `identity` (the logit itself, as
            ms-marco cross-encoders give it): the CrossEncoder's `activation_fn`.

    Example (a model directory of `kbert train --task rerank`, or a CrossEncoder folder):
    >>> reranker = Reranker.load("runs/reranker")  # doctest: +SKIP
    >>> reranker.rank("酒店怎么样", ["房间很干净", "这本书很好看"])  # doctest: +SKIP
    [{'index': 0, 'score': 0.93}, {'index': 1, 'score': 0.08}]
    """

    model: keras.Model
    tokenizer: object
    maxlen: int
    source: str
    activation: str = "sigmoid"

    @classmethod
    def load(cls, folder: "str | os.PathLike[str]", dtype: str = "auto") -> "Reranker":
        """A cross-encoder folder: Hugging Face's config.json of a `...ForSequenceClassification` with one
        label, its `model.safetensors` and tokenizer (a `kbert train --task rerank` directory is one), or a
        sentence-transformers CrossEncoder on a causal LM (`causal_score`); `dtype` as `Embedder.load` takes it."""
        from kbert.checkpoints.hf import load_hf_weights
        from kbert.training.precision import model_dtype

        folder = ModelFolder.of(folder)  # each file read once, here and by whoever passed it
        config = cross_encoder_config(folder)  # a one-label sequence classifier, else an error saying what it is
        activation, score = score_activation(folder, config), causal_score(folder)
        family, config = resolve(folder)
        tokenizer = folder_tokenizer(folder)
        check_tokenizer_fits(tokenizer, config.vocab_size, folder)
        if score is None:
            check_sequence_classifier(family.name, f"{folder.file('config.json')}: a sequence classifier of "
                                                   f"model_type {family.model_type}")
        with model_dtype(dtype):
            with undrawn_weights():  # the checkpoint's values are read into it, not random ones replaced
                bert = build_transformer_model(folder, padding=tokenizer.padding)
                model = reranker_model(bert) if score is None else causal_reranker_model(bert, score)
            load_hf_weights(model, folder)
        if score is not None:
            tokenizer = chat_pairs(folder, tokenizer)
        positions = config.longest_input
        return cls(model, tokenizer, min(positions, model_max_length(folder) or positions), folder.path, activation)

    def logits(self, queries: Sequence[str], passages: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """The relevance logit of each (query, passage) pair."""
        encoded = self.tokenizer.encode_all(list(queries), list(passages), maxlen=self.maxlen)
        return self.logits_of_tokens(encoded, batch_size)

    def logits_of_tokens(self, encoded: Sequence[Tuple[List[int], List[int]]], batch_size: int = 32) -> np.ndarray:
        """`logits` of pairs already tokenized: `(token_ids, segment_ids)` each, at most `maxlen` long (a
        server tokenizes on its own threads, to count and check the tokens before the model runs)."""
        logits = np.empty(len(encoded), np.float32)
        for rows, features in batches_by_length(encoded, batch_size, maxlen=self.maxlen, pad_id=self.tokenizer.pad_id):
            logits[rows] = keras.ops.convert_to_numpy(self.model.predict_on_batch(list(features)))[:len(rows), 0]
        return logits

    def score(self, query: str, passages: Sequence[str], batch_size: int = 32, raw: bool = False) -> np.ndarray:
        """Each passage's relevance to `query`: its logit through the model's `activation` (the logit itself
        with `raw`)."""
        logits = self.logits([query] * len(passages), passages, batch_size)
        return logits if raw else self.scores(logits)

    def scores(self, logits: np.ndarray) -> np.ndarray:
        """Logits as the model's scores: through its `activation` (the sigmoid, or none)."""
        logits = np.asarray(logits, np.float64)
        return 1 / (1 + np.exp(-logits)) if self.activation == "sigmoid" else logits

    def rank(self, query: str, passages: Sequence[str], top_n: Optional[int] = None, raw: bool = False,
             batch_size: int = 32) -> List[Dict[str, float]]:
        """`[{"index", "score"}]` of the passages, most relevant first (the first `top_n`)."""
        scores = self.score(query, passages, batch_size, raw)
        order = np.argsort(-scores, kind="stable")[:top_n]
        return [{"index": int(index), "score": float(scores[index])} for index in order]


# sentence-transformers' CrossEncoder `activation_fn` (by its last name) and kbert's name for it
SCORE_ACTIVATIONS = {"Sigmoid": "sigmoid", "Identity": "identity"}


def score_activation(folder: str, config: dict) -> str:
    """The CrossEncoder's `activation_fn`, where sentence-transformers keeps it: `config_sentence_transformers.json`
    (version 6), `config.json`'s `sentence_transformers` (4 and 5) or `sbert_ce_default_activation_function`
    (before 4); else the sigmoid, its default for one label."""
    from kbert.embeddings.folders import SETTINGS_FILE, settings

    places = [(os.path.join(folder, SETTINGS_FILE), settings(folder).get("activation_fn")),
              (os.path.join(folder, "config.json"), (config.get("sentence_transformers") or {}).get("activation_fn")
               if isinstance(config.get("sentence_transformers"), dict) else None),
              (os.path.join(folder, "config.json"), config.get("sbert_ce_default_activation_function"))]
    path, named = next(((path, named) for path, named in places if named is not None), (None, None))
    if named is None:
        return "sigmoid"
    kind = str(named).rsplit(".", 1)[-1]
    if kind not in SCORE_ACTIVATIONS:
        raise KbertError(f"{path}: activation_fn {named!r} is not one kbert applies to a reranker's logit "
                         f"({', '.join(SCORE_ACTIVATIONS)})")
    return SCORE_ACTIVATIONS[kind]


def cross_encoder_config(folder: "str | ModelFolder") -> dict:
    folder = ModelFolder.of(folder)
    if not folder.has("config.json"):
        raise KbertError(f"{folder}: no config.json; a reranker is a Hugging Face sequence classifier folder "
                         "(config.json, model.safetensors, its tokenizer) or a kbert train --task rerank directory")
    config = folder.parsed("config.json", read_json_object)
    architectures = config.get("architectures") or []
    if causal_score(folder) is not None:
        return config
    labels = len(config.get("id2label") or {}) or config.get("num_labels", 2)
    if not is_sequence_classifier(folder) or labels != 1:
        raise KbertError(f"{folder.file('config.json')}: architectures {architectures} with {labels} labels; a "
                         "reranker is a ...ForSequenceClassification with one label (a CrossEncoder's relevance score)"
                         + ("; kbert does not serve a CrossEncoder of several labels" if labels != 1 else ""))
    return config


def check_sequence_classifier(family: str, what: str) -> None:
    """Refuses a family whose `...ForSequenceClassification` kbert does not build (`what` says where)."""
    if not get_family(family).hf_sequence_classifier:
        readable = [name for name in FAMILIES if get_family(name).hf_sequence_classifier]
        raise KbertError(f"{what} (kbert builds the sequence classifiers of {', '.join(readable)})")


def is_sequence_classifier(folder: ModelFolder) -> bool:
    """Whether `folder`'s config.json names a `...ForSequenceClassification` (for a decoder: its last token's
    `score`, not its LM head)."""
    config = folder.parsed("config.json", read_json_object) if folder.has("config.json") else {}
    return any(str(name).endswith("ForSequenceClassification") for name in config.get("architectures") or [])


def causal_score(folder: "str | ModelFolder"):
    """The `LogitScore` of a sentence-transformers CrossEncoder folder on a causal LM (its `modules.json`: a
    text-generation `Transformer`, then a `LogitScore`); None for any other folder. A folder that lists a
    `LogitScore` in another pipeline is refused naming its modules. Each file read once per `ModelFolder`."""
    from kbert.embeddings.files import json_file
    from kbert.embeddings.folders import MODULES_FILE

    folder = ModelFolder.of(folder)
    listed = folder.parsed(MODULES_FILE, json_file) if folder.has(MODULES_FILE) else []
    if not any(isinstance(entry, dict) and str(entry.get("type", "")).endswith("LogitScore")
               for entry in (listed if isinstance(listed, list) else [])):
        return None
    return folder.parsed(MODULES_FILE, _causal_score_in)


def _causal_score_in(modules_file: str):
    """The checked `LogitScore` of the pipeline `modules_file` lists (one that names a LogitScore)."""
    from kbert.embeddings.folders import read_modules
    from kbert.embeddings.modules import LogitScore, Transformer

    modules = read_modules(os.path.dirname(modules_file))
    if len(modules) != 2 or not (isinstance(modules[0], Transformer) and modules[0].causal_lm
                                 and isinstance(modules[1], LogitScore)):
        raise KbertError(f"{modules_file}: {[type(module).__name__ for module in modules]}; kbert "
                         "reads a causal LM's CrossEncoder as a text-generation Transformer, then a LogitScore")
    return modules[1]


def is_reranker(folder: str) -> bool:
    """Whether a folder holds a one-label sequence classifier (a cross-encoder)."""
    try:
        cross_encoder_config(folder)
        return True
    except (KbertError, ValueError, OSError):
        return False


class RerankTask(Task):
    """A cross-encoder trained pointwise: binary cross-entropy of each pair's logit against its label; the
    kept epoch has the best validation accuracy (a pair called relevant when its score passes 0.5).

    Or listwise (`rerank_loss="listwise"`): each step sees groups of `group_size` passages of one query (its
    most relevant passage and others of the query, `listwise_groups`), and the loss is the softmax
    cross-entropy over each group (`ListwiseSoftmaxLoss`); the logits then rank but are not calibrated
    around 0, so the kept epoch has the best validation nDCG@10 of each query's passages reranked.
    """

    name = "rerank"
    score_name = "val_accuracy"
    score_label = "validation pair accuracy"
    reads_tokenizer_json = True

    def __init__(self, options):
        self.options, self.tokenizer, self.backbone = options, None, None
        self.listwise = options.rerank_loss == "listwise"
        # a causal LM's reranker (its checkpoint folder, and the LogitScore it trains); None: a sequence classifier
        self.causal_folder, self.score = None, None
        self.classifier_folder = None  # a CrossEncoder folder trained on: its head is where training starts
        if self.listwise:
            self.score_name, self.score_label = "val_ndcg@10", "validation nDCG@10"

    @classmethod
    def from_options(cls, options) -> "RerankTask":
        return cls(options)

    def adopt_checkpoint(self, options, checkpoint_path: Optional[str]):
        """A decoder's reranker is its causal LM scored by its LM head: its checkpoint folder's CrossEncoder
        `LogitScore` (or, as sentence-transformers reads a bare causal LM, the logits of "yes" and "no"), chat
        template and prompt; from a `...ForSequenceClassification` folder, as sentence-transformers reads that
        too, the last token's `score`. A CrossEncoder folder of any family is trained on from its own head."""
        folder = ModelFolder.of(checkpoint_path) if checkpoint_path and os.path.isdir(checkpoint_path) else None
        self.classifier_folder = folder if folder is not None and is_sequence_classifier(folder) else None
        if get_family(options.model).causal_lm and self.classifier_folder is None:
            if folder is None:
                raise KbertError(f"--model {options.model}: a decoder's reranker scores with its LM head: train it "
                                 "from --checkpoint FOLDER (a CrossEncoder folder, or the causal LM's)")
            self.causal_folder = folder
        return options

    def read(self, tokenizer, train_path: str, valid_path: Optional[str], num_labels: Optional[int],
             options) -> TrainingData:
        if num_labels not in (None, 1):
            raise DataError("--num-labels: a reranker gives one score per pair; leave it out")
        if self.causal_folder is not None:
            self.score = causal_score(self.causal_folder) or default_score(self.causal_folder, tokenizer)
            tokenizer = chat_pairs(self.causal_folder, tokenizer)
        self.tokenizer = tokenizer
        pairs, report = read_training_file(read_judged_pairs, train_path, options)
        if len({pair.label > 0.5 for pair in pairs}) < 2:
            raise DataError(f"{train_path}: every pair is {'relevant' if pairs[0].label > 0.5 else 'irrelevant'}; "
                            "a reranker learns from both (label 1 and label 0)")
        check_known_tokens(train_path, (ids for ids, _ in self._encoded(pairs[:2000])), tokenizer)
        valid, valid_pairs, valid_report = None, [], None
        if valid_path:
            valid_pairs, valid_report = read_training_file(read_judged_pairs, valid_path, options)
        state = {"text_pairs": True, "rerank_loss": self.options.rerank_loss}
        if self.listwise:  # the validation pairs are reranked by the task itself (validation_score)
            groups = listwise_groups(pairs, options.group_size, options.seed)
            if not groups:
                raise DataError(f"{train_path}: no query has both a relevant passage (label > 0) and another "
                                "passage; --rerank-loss listwise ranks each query's passages against each other")
            report = f"{report}; {len(groups)} queries in groups of {options.group_size} passages"
            train = self._dataset([pair for group in groups for pair in group], False, bucketing=False)
            return TrainingData(train, None, LabelMap(["relevance"]), len(train), str(report),
                                str(valid_report) if valid_report else None, state, valid_pairs)
        train = self._dataset(pairs, options.shuffle)
        valid = self._dataset(valid_pairs, False) if valid_pairs else None
        return TrainingData(train, valid, LabelMap(["relevance"]), len(train), str(report),
                            str(valid_report) if valid_report else None, state)

    def _encoded(self, pairs: Sequence[JudgedPair]):
        return self.tokenizer.encode_all([pair.query for pair in pairs], [pair.passage for pair in pairs],
                                         maxlen=self.options.maxlen)

    def _dataset(self, pairs: Sequence[JudgedPair], shuffle: bool, bucketing: Optional[bool] = None):
        labels = np.array([[pair.label] for pair in pairs], np.float32)
        return make_dataset(self._encoded(pairs), labels, self.options.batch_size, shuffle=shuffle,
                            seed=self.options.seed,
                            bucketing=self.options.bucketing if bucketing is None else bucketing,
                            pad_ids=(self.tokenizer.pad_id,))

    def build(self, bert, num_labels: int, options):
        from kbert.checkpoints.hf import load_hf_weights

        self.backbone = bert
        if self.score is not None:  # the LM head is the checkpoint's: the token table, or its own matrix read here
            build, folder = lambda: causal_reranker_model(bert, self.score), self.causal_folder
            if built_config(bert, get_family(bert.family)).tie_word_embeddings:
                folder = None  # the head is the token table, loaded with the backbone
        else:
            check_sequence_classifier(bert.family, f"--task rerank trains the families whose folders "
                                                   f"sentence-transformers' CrossEncoder reads; got --model "
                                                   f"{bert.family}")
            # a CrossEncoder trained further starts from its own head; on a backbone's checkpoint it is drawn
            build, folder = lambda: reranker_model(bert), self.classifier_folder
        with undrawn_weights():
            model = build()
        if folder is not None:
            load_hf_weights(model, folder, undrawn_only=True)  # the head alone: the backbone is loaded already
        initialize_undrawn()
        return model

    def compile_args(self, model) -> dict:
        if self.listwise:
            return {"loss": ListwiseSoftmaxLoss(self.options.group_size)}
        return {"loss": keras.losses.BinaryCrossentropy(from_logits=True),
                "metrics": [keras.metrics.BinaryAccuracy(name="accuracy", threshold=0.0)]}

    def validation_score(self, model, data: TrainingData):
        if not self.listwise:
            return super().validation_score(model, data)
        if not data.valid_examples:
            return lambda logs: None
        pairs = data.valid_examples

        def score(logs: dict) -> float:
            reranker = Reranker(model, self.tokenizer, self.options.maxlen, "")
            logits = reranker.logits([pair.query for pair in pairs], [pair.passage for pair in pairs])
            logs[self.score_name] = value = ranking_of(pairs, logits)["ndcg@10"]
            return value

        return score

    def finish(self, model, directory: str) -> None:
        """The CrossEncoder folder's files beside kbert's: Hugging Face's sequence classifier with one label, or a
        causal LM's CrossEncoder (`write_causal_cross_encoder`)."""
        if self.score is not None:
            write_causal_cross_encoder(model, self.backbone, self.tokenizer, self.score, self.options.maxlen,
                                       directory)
        else:
            write_cross_encoder(model, self.backbone, self.tokenizer, self.options.maxlen, directory)


def write_cross_encoder(model: keras.Model, bert: keras.Model, tokenizer, maxlen: int, directory: str) -> None:
    """`model` (`reranker_model`) as Hugging Face's `...ForSequenceClassification` with one label (BERT's; RoBERTa's,
    XLM-R's and MPNet's, with the classification head's `classifier.dense` and `out_proj`; DistilBERT's
    `pre_classifier`; DeBERTa's `pooler.dense` with GELU), which transformers and sentence-transformers' `CrossEncoder` load; its tokenizer files
    (`save_tokenizer_files`)."""
    from kbert.checkpoints.hf import save_hf_weights
    from kbert.io import atomic_write_text
    from kbert.models.heads import Heads

    save_hf_weights(model, directory)  # the backbone under its prefix (`bert.`, `roberta.`, ...), the head beside
    family = get_family(bert.family)
    config = family.hf_config(built_config(bert, family), Heads())
    bare = config["architectures"][0]  # BertModel, XLMRobertaModel, DistilBertModel, ...
    if family.causal_lm:
        # a decoder's classifier reads the last token that is not the pad id (transformers' rule), or refuses a batch
        config = {**config, "pad_token_id": tokenizer.pad_token_id}
    config = {**config, "architectures": [bare[:-len("Model")] + "ForSequenceClassification"],
              "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0},
              "sentence_transformers": {"activation_fn": "torch.nn.modules.activation.Sigmoid"}}
    atomic_write_text(os.path.join(directory, "config.json"), json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_tokenizer_files(tokenizer, directory, maxlen)


def write_causal_cross_encoder(model: keras.Model, bert: keras.Model, pairs, score, maxlen: int,
                               directory: str) -> None:
    """`model` (`causal_reranker_model`) as sentence-transformers 6 writes a causal LM's CrossEncoder: the LM
    (`...ForCausalLM`, its trained head), its tokenizer files and chat template, `modules.json` (a text-generation
    `Transformer`, the `LogitScore`), its prompt as the default one, Sigmoid scores."""
    from kbert.checkpoints.hf import save_hf_weights
    from kbert.embeddings.files import write_json
    from kbert.embeddings.folders import SETTINGS_FILE
    from kbert.embeddings.modules import Transformer, write_modules_file
    from kbert.io import atomic_write_text
    from kbert.models.heads import Heads
    from kbert.tokenizers.chat_template import TEMPLATE_FILE

    save_hf_weights(model, directory)
    family = get_family(bert.family)
    config = family.hf_config(built_config(bert, family), Heads(mlm="linear"))
    atomic_write_text(os.path.join(directory, "config.json"), json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_tokenizer_files(pairs.tokenizer, directory, maxlen)
    if pairs.template is not None:
        atomic_write_text(os.path.join(directory, TEMPLATE_FILE), pairs.template.source)
    reads = {"method": "forward", "method_output_name": "logits"}
    modalities = {"text": reads, **({"message": {**reads, "format": "flat"}} if pairs.template else {})}
    write_modules_file(directory, [Transformer(directory, {
        "transformer_task": "text-generation", "max_seq_length": maxlen, "modality_config": modalities,
        "module_output_name": "causal_logits"}), score])
    write_json(os.path.join(directory, SETTINGS_FILE), {
        "model_type": "CrossEncoder", "activation_fn": "torch.nn.modules.activation.Sigmoid",
        "prompts": {"default": pairs.prompt} if pairs.prompt else {},
        "default_prompt_name": "default" if pairs.prompt else None})


def evaluate(model: str, data: str, batch_size: int = 32) -> dict:
    """A reranker on judged pairs (`query<TAB>passage<TAB>label`): each query's passages reranked by score,
    nDCG@10 and MRR@10 over the queries with a relevant passage (as MTEB's reranking tasks score), and the
    pair accuracy (a pair called relevant when its score passes 0.5, as its label does)."""
    pairs, _ = read_judged_pairs(data)
    reranker = Reranker.load(model)
    logits = reranker.logits([pair.query for pair in pairs], [pair.passage for pair in pairs], batch_size)
    accuracy = float(np.mean([(logit > 0) == (pair.label > 0.5) for logit, pair in zip(logits, pairs)]))
    return {"kind": "reranking", "data": data, **ranking_of(pairs, logits), "accuracy": accuracy,
            "queries": len({pair.query for pair in pairs}), "pairs": len(pairs)}
