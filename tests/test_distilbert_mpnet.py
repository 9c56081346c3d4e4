"""DistilBERT and MPNet, the backbones of the msmarco / multi-qa models and of all-mpnet-base-v2.

Without `transformers`: each family's Hugging Face layout written by hand (the names and shapes transformers 5
saves), loaded and written back byte for byte; their analytic parameter tables against built models; a
sentence-transformers folder and a cross-encoder on each backbone, scored as their layers compute. With
`transformers` and `sentence-transformers` (the parity venv): random models that transformers builds give its
outputs on padded rows, both ways, sharded too, and sentence-transformers' vectors and CrossEncoder scores. The
random models are drawn with `initializer_range` 0.3: at transformers' 0.02, MPNet's relative bias moves the
outputs by less than the tolerance.
"""

import json

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file

from kbert import build_transformer_model, load_hf_weights, save_hf_weights
from kbert.analysis.params import analyze
from kbert.analysis.summary import crosscheck
from kbert.models.registry import resolve
from test_hf_families import assert_transformers_parity, layer_norm, linear, written_back

V, H, I, P = 60, 16, 32, 40
SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
             "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods."]


def distilbert_backbone(layers=2):
    names = {"embeddings.word_embeddings.weight": (V, H), "embeddings.position_embeddings.weight": (P, H),
             **layer_norm("embeddings.LayerNorm")}
    for index in range(layers):
        scope = f"transformer.layer.{index}"
        for part in ("q_lin", "k_lin", "v_lin", "out_lin"):
            names.update(linear(f"{scope}.attention.{part}", H, H))
        names.update({**layer_norm(f"{scope}.sa_layer_norm"), **linear(f"{scope}.ffn.lin1", I, H),
                      **linear(f"{scope}.ffn.lin2", H, I), **layer_norm(f"{scope}.output_layer_norm")})
    return names


def mpnet_backbone(layers=2):
    names = {"embeddings.word_embeddings.weight": (V, H), "embeddings.position_embeddings.weight": (P + 2, H),
             **layer_norm("embeddings.LayerNorm"), "encoder.relative_attention_bias.weight": (32, 2)}
    for index in range(layers):
        scope = f"encoder.layer.{index}"
        for part in "qkvo":
            names.update(linear(f"{scope}.attention.attn.{part}", H, H))
        names.update({**layer_norm(f"{scope}.attention.LayerNorm"), **linear(f"{scope}.intermediate.dense", I, H),
                      **linear(f"{scope}.output.dense", H, I), **layer_norm(f"{scope}.output.LayerNorm")})
    return names


def prefixed(prefix, names):
    return {f"{prefix}.{name}": shape for name, shape in names.items()}


DISTILBERT = {"model_type": "distilbert", "vocab_size": V, "dim": H, "n_layers": 2, "n_heads": 2, "hidden_dim": I,
              "max_position_embeddings": P, "dropout": 0.0, "attention_dropout": 0.0, "initializer_range": 0.3}
MPNET = {"model_type": "mpnet", "vocab_size": V, "hidden_size": H, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": I, "max_position_embeddings": P + 2, "hidden_dropout_prob": 0.0,
         "attention_probs_dropout_prob": 0.0, "layer_norm_eps": 1e-5, "initializer_range": 0.3}
# layout -> (config.json, builder flags, the Hugging Face tensors, the class).
LAYOUTS = {
    "distilbert_mlm": (DISTILBERT, {"with_mlm": True},
                       {**prefixed("distilbert", distilbert_backbone()), **linear("vocab_transform", H, H),
                        **layer_norm("vocab_layer_norm"), "vocab_projector.bias": (V,)}, "DistilBertForMaskedLM"),
    "distilbert": (DISTILBERT, {}, distilbert_backbone(), "DistilBertModel"),
    "mpnet_mlm": (MPNET, {"with_mlm": True},
                  {**prefixed("mpnet", mpnet_backbone()), **linear("lm_head.dense", H, H),
                   **layer_norm("lm_head.layer_norm"), "lm_head.bias": (V,)}, "MPNetForMaskedLM"),
    "mpnet_pooler": (MPNET, {"with_pool": True}, {**mpnet_backbone(), **linear("pooler.dense", H, H)}, "MPNetModel"),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layout_loads_and_is_written_back_byte_for_byte(tmp_path, layout):
    model, tensors, saved = written_back(tmp_path, layout, LAYOUTS)
    config = LAYOUTS[layout][0]
    assert model.family == config["model_type"]
    query = {variable.path: variable for variable in model.weights}["Transformer-1-MultiHeadSelfAttention/query/kernel"]
    name = next(name for name in tensors if name.endswith(("layer.1.attention.q_lin.weight",
                                                           "layer.1.attention.attn.q.weight")))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(query), tensors[name].T)
    assert {key: saved[key] for key in config} == config  # transformers' own keys (DistilBERT's dim, n_layers, ...)
    assert "type_vocab_size" not in saved


@pytest.mark.parametrize("name, flags, total", [
    ("distilbert_base_uncased", {"with_mlm": True}, 66_985_530),  # DistilBertForMaskedLM, counted by transformers
    ("all_mpnet_base_v2", {"with_pool": True}, 109_486_464),  # MPNetModel, counted by transformers
])
def test_the_analytic_table_is_the_built_model_and_transformers_count(name, flags, total):
    from kbert.models.config import bundled_config_path

    analysis = analyze(resolve(bundled_config_path(name))[1], **flags)
    model = build_transformer_model(bundled_config_path(name), **flags)
    assert all(row.ok for row in crosscheck(analysis, model))
    assert analysis.total == model.count_params() == total


def test_segment_ids_are_taken_and_ignored_as_transformers_ignores_them():
    """The model keeps Input-Segment so that every task feeds it alike, and reads nothing from it."""
    for config in (DISTILBERT, MPNET):
        model = build_transformer_model(config)
        assert [tensor.name for tensor in model.inputs] == ["Input-Token", "Input-Segment"]
        assert "Embedding-Segment" not in [layer.name for layer in model.layers]
        tokens = np.array([[3, 5, 7, 9]])
        np.testing.assert_array_equal(model.predict_on_batch([tokens, np.zeros_like(tokens)]),
                                      model.predict_on_batch([tokens, np.ones_like(tokens)]))


@pytest.mark.parametrize("key, value, message", [
    ("relative_attention_num_buckets", 64, "transformers' MPNet computes with 32"),
    ("pad_token_id", 0, "transformers' MPNet computes with 1"),
])
def test_mpnet_keys_transformers_would_not_compute_are_refused(key, value, message):
    from kbert import ConfigError

    with pytest.raises(ConfigError, match=f"key '{key}': {message}"):
        resolve({**MPNET, key: value})


# --- sentence-transformers folders and cross-encoders on these backbones ------------------------------------------

# Each family's framing, as its tokenizer.json on the hub writes it: MPNet's RoBERTa-like <s> A </s></s> B </s>
# with <pad> 1, DistilBERT's [CLS] A [SEP] B [SEP] with [PAD] 0.
FRAMING = {"mpnet": (["<s>", "<pad>", "</s>", "<unk>", "<mask>"], "MPNetTokenizer"),
           "distilbert": (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "DistilBertTokenizer")}


def wordpiece_folder(folder, model_type, head=None):
    """A random model of `model_type` (kbert's weights) and a lower-casing WordPiece `tokenizer.json` trained here
    on SENTENCES, in `folder`; with `head` ("reranker"), a one-label sequence classifier's head too."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    specials, tokenizer_class = FRAMING[model_type]
    tokenizer = Tokenizer(models.WordPiece(unk_token=specials[1 if model_type == "distilbert" else 3]))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train_from_iterator(SENTENCES * 4, trainers.WordPieceTrainer(vocab_size=V, special_tokens=specials))
    if model_type == "mpnet":
        tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    else:
        tokenizer.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    # transformers' own draw (0.02): kbert's models trained from these folders compare within 1e-5
    config = {**(MPNET if model_type == "mpnet" else DISTILBERT), "vocab_size": tokenizer.get_vocab_size(),
              "initializer_range": 0.02}
    keras.utils.set_random_seed(5)
    bert = build_transformer_model(config)
    model = reranker_model(bert) if head else bert
    if head:  # kbert's draw of a head is small: larger weights, so that the scores differ across passages
        for variable in model.get_layer("dense_output").weights + model.get_layer(
                get_family(model_type).classifier_hidden).weights:
            variable.assign(np.random.default_rng(0).normal(0, 0.3, variable.shape))
    save_hf_weights(bert, folder)  # config.json
    if head:  # the task model: the backbone under its prefix, the head beside it
        save_hf_weights(model, folder / "model.safetensors")
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({
            **config, "architectures": [f"{get_family(model_type).hf_class}ForSequenceClassification"],
            "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}))
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": tokenizer_class,
                                                              "do_lower_case": True}))
    return folder


def reranker_model(bert):
    from kbert.tasks.reranking import reranker_model as make

    return make(bert)


def get_family(model_type):
    return resolve({**(MPNET if model_type == "mpnet" else DISTILBERT)})[0]


def embedder_folder(folder, model_type):
    from kbert.embeddings.folders import write_modules

    wordpiece_folder(folder, model_type)
    write_modules(str(folder), "mean", H, [], True, 32)
    return folder


@pytest.mark.parametrize("model_type", ["mpnet", "distilbert"])
def test_an_embedder_on_each_backbone_pads_with_its_own_padding_id(tmp_path, model_type):
    """Texts of several lengths in one batch give the vectors each gives alone (MPNet's pad token is <pad>, id 1;
    batches are padded with its negative id)."""
    from kbert.embeddings.embedder import Embedder

    embedder = Embedder.load(embedder_folder(tmp_path / model_type, model_type))
    assert embedder.backbone.family == model_type
    assert embedder.tokenizer.pad_token_id == (1 if model_type == "mpnet" else 0)
    together = embedder.encode(SENTENCES, batch_size=len(SENTENCES))
    alone = np.concatenate([embedder.encode([text]) for text in SENTENCES])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)


def test_a_distilbert_cross_encoder_scores_with_its_relu_pre_classifier(tmp_path):
    """DistilBertForSequenceClassification: [CLS], pre_classifier and ReLU (not BERT's tanh pooler), classifier."""
    from kbert.tasks.reranking import Reranker

    folder = wordpiece_folder(tmp_path / "distilbert", "distilbert", head="reranker")
    tensors = load_file(str(folder / "model.safetensors"))
    assert {"pre_classifier.weight", "classifier.weight", "distilbert.embeddings.word_embeddings.weight"} <= set(tensors)
    reranker = Reranker.load(folder)
    queries, passages = ["A man is eating food."] * 3, ["A man is eating a piece of bread.", "A man is eating.",
                                                        "The girl is carrying a baby."]
    backbone = build_transformer_model(folder / "config.json")
    load_hf_weights(backbone, folder)
    expected = []
    for query, passage in zip(queries, passages):
        ids, segments = reranker.tokenizer.encode(query, passage)
        first = backbone.predict_on_batch([np.array([ids]), np.array([segments])])[0, 0]
        hidden = np.maximum(first @ tensors["pre_classifier.weight"].T + tensors["pre_classifier.bias"], 0)
        expected.append(float(hidden @ tensors["classifier.weight"][0] + tensors["classifier.bias"][0]))
    np.testing.assert_allclose(reranker.logits(queries, passages), expected, atol=1e-4)
    assert np.ptp(expected) > 1e-4  # the passages are told apart


def test_a_relative_bias_is_added_after_the_scaling_on_every_path():
    """MPNet adds its bias to the scaled scores: softmax(q·k / √d + bias), checked against NumPy on the fused path
    (JAX, PyTorch) and on the einsum path (TensorFlow, or when the scores are returned)."""
    from kbert.layers import MultiHeadSelfAttention, T5RelativePositionBias

    x = keras.random.normal((2, 5, 8), seed=3)
    bias = T5RelativePositionBias(32, num_heads=2, embeddings_initializer=keras.initializers.RandomNormal(0, 2.0,
                                                                                                         seed=1))([x, x])
    x, bias = keras.ops.convert_to_numpy(x), keras.ops.convert_to_numpy(bias)
    for return_scores in (False, True):
        attention = MultiHeadSelfAttention(num_heads=2, head_size=4, position_encoding="t5_relative",
                                           return_attention_scores=return_scores)
        output = attention([x, x, x, bias])
        weights = {variable.path.split("/", 1)[1]: keras.ops.convert_to_numpy(variable)
                   for variable in attention.weights}

        def heads(part):
            return (x @ weights[f"{part}/kernel"] + weights[f"{part}/bias"]).reshape(2, 5, 2, 4)

        scores = np.einsum("bqhd,bkhd->bhqk", heads("query"), heads("key")) / 2.0 + bias.transpose(2, 0, 1)[None]
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = np.einsum("bhqk,bkhd->bqhd", probs, heads("value")).reshape(2, 5, 8)
        expected = context @ weights["output/kernel"] + weights["output/bias"]
        np.testing.assert_allclose(keras.ops.convert_to_numpy(output[0] if return_scores else output), expected,
                                   atol=1e-5)


# --- parity with transformers and sentence-transformers -----------------------------------------------------------

TOKENS = np.array([[5, 9, 11, 13, 17, 7], [5, 8, 6, 7, 0, 0]])
REAL = TOKENS > 0


def padded(layout):
    """TOKENS, padded with the family's padding id (MPNet's <pad> is 1)."""
    return np.where(REAL, TOKENS, 1 if layout.startswith("mpnet") else 0)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parity
def test_same_outputs_as_transformers_both_ways_and_sharded(tmp_path, layout):
    assert_transformers_parity(tmp_path, LAYOUTS[layout], padded(layout), REAL)


@pytest.mark.parametrize("model_type", ["mpnet", "distilbert"])
@pytest.mark.parity
def test_an_embedder_on_each_backbone_matches_sentence_transformers_both_ways(tmp_path, model_type):
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install sentence-transformers "
                                                "(with torch) for the parity tests")
    from kbert.embeddings.embedder import Embedder

    folder = embedder_folder(tmp_path / model_type, model_type)
    reference = sentence_transformers.SentenceTransformer(str(folder), device="cpu").encode(SENTENCES)
    embedder = Embedder.load(folder)
    assert np.abs(embedder.encode(SENTENCES) - reference).max() <= 1e-5
    again = sentence_transformers.SentenceTransformer(embedder.save(tmp_path / "saved"), device="cpu")
    assert np.abs(again.encode(SENTENCES) - reference).max() <= 1e-5


def assert_cross_encoder_parity(folder, queries=("A man is eating food.",) * 3,
                                passages=("A man is eating a piece of bread.", "Someone plays.",
                                          "The girl is carrying a baby."), told_apart=False):
    """kbert's `Reranker` on the CrossEncoder `folder` gives transformers' logits for these pairs (≤ 1e-4; where
    `told_apart`, the passages' logits differ by more than that) and sentence-transformers' `CrossEncoder` scores
    (≤ 1e-5); returns the reranker."""
    torch = pytest.importorskip("torch", reason="the parity extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the parity extra is not installed")
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="the parity extra is not installed")
    from kbert.tasks.reranking import Reranker

    queries, passages = list(queries), list(passages)
    reference = transformers.AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    with torch.no_grad():
        expected = reference(**tokenizer(queries, passages, padding=True, return_tensors="pt")).logits[:, 0].numpy()
    assert np.ptp(expected) > 1e-3 or not told_apart
    reranker = Reranker.load(folder)
    np.testing.assert_allclose(reranker.logits(queries, passages), expected, atol=1e-4)
    scores = sentence_transformers.CrossEncoder(str(folder), device="cpu").predict(list(zip(queries, passages)))
    np.testing.assert_allclose(reranker.score(queries[0], passages), scores, atol=1e-5)
    return reranker


@pytest.mark.parametrize("model_type", ["mpnet", "distilbert"])
@pytest.mark.parity
def test_a_cross_encoder_on_each_backbone_scores_as_transformers_and_sentence_transformers(tmp_path, model_type):
    assert_cross_encoder_parity(wordpiece_folder(tmp_path / model_type, model_type, head="reranker"))


# --- kbert's tasks on these backbones -------------------------------------------------------------------------------

MEN = ["A man is eating food.", "A man is riding a horse.", "Two men pushed carts through the woods.",
       "A man is eating a piece of bread."]
WOMEN = ["A woman is playing violin.", "The girl is carrying a baby.", "A woman is eating food.",
         "The girl is playing drums."]


@pytest.fixture(scope="module", params=["mpnet", "distilbert"])
def backbone(request, tmp_path_factory):
    """A random model of each family with an MLM head, and its tokenizer.json, as a Hugging Face folder."""
    folder = wordpiece_folder(tmp_path_factory.mktemp(request.param) / "hf", request.param)
    bert = build_transformer_model(folder / "config.json", with_mlm=True)
    save_hf_weights(bert, folder)
    return folder


def cli(*arguments) -> int:
    from kbert.cli.main import main

    return main([str(argument) for argument in arguments])


# Every task trained, written and read back through the CLI: 33-50 s here, an example (CI runs it).
@pytest.mark.examples
def test_each_task_trains_from_the_cli_and_reads_back(backbone, tmp_path):
    family = backbone.parent.name.rstrip("0123456789")
    assert_every_task(backbone, tmp_path, family, pad_token_id=1 if family == "mpnet" else 0,
                      cross_encoder="MPNet" if family == "mpnet" else "DistilBert")


def assert_every_task(backbone, tmp_path, family, pad_token_id, cross_encoder=None, epochs=8):
    """Pre-training from the MLM head, a classifier fine-tuned from that (to accuracy 1.0 on texts that tell men
    from women) and exported to ONNX (int8), an embedding model, a reranker (where `cross_encoder`, the stem of
    its Hugging Face class, says the family has one) and a tagger with a CRF: each written and read back by kbert."""
    from kbert.tasks.classification import load_classifier
    from kbert.embeddings.embedder import Embedder
    from kbert.tasks.ner import load_tagger
    from kbert.tasks.reranking import Reranker

    (tmp_path / "corpus.txt").write_text("\n".join(MEN + WOMEN) * 4 + "\n")
    rows = [f"{text}\t1" for text in MEN] * 4 + [f"{text}\t0" for text in WOMEN] * 4
    (tmp_path / "labelled.tsv").write_text("\n".join(rows[index] for index in
                                                     np.random.default_rng(0).permutation(len(rows))) + "\n")
    (tmp_path / "pairs.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in zip(MEN, MEN[1:] + MEN[:1])))
    (tmp_path / "judged.tsv").write_text("".join(f"{a}\t{a}\t1\n{a}\t{b}\t0\n" for a, b in zip(MEN, WOMEN)))
    common = ["--maxlen", 32, "--batch-size", 8]
    assert cli("pretrain", "--checkpoint", backbone, "--train", tmp_path / "corpus.txt", "--out", tmp_path / "pre",
               "--epochs", 1, *common) == 0
    assert cli("train", "--checkpoint", tmp_path / "pre", "--train", tmp_path / "labelled.tsv", "--valid",
               tmp_path / "labelled.tsv", "--out", tmp_path / "classify", "--epochs", epochs, "--lr", "3e-3",
               *common) == 0
    state = json.loads((tmp_path / "classify" / "training.json").read_text())
    assert state["options"]["model"] == family
    assert state["best_val_accuracy"] == 1.0
    classifier = load_classifier(str(tmp_path / "classify"))
    assert [row["label"] for row in classifier.labelled([MEN[0], WOMEN[0]])] == ["1", "0"]
    # onnxruntime against Keras on the model's own texts, checked by the command (Input-Segment, unread, included)
    assert cli("export", "--model", tmp_path / "classify", "--quantize", "int8", tmp_path / "classifier.onnx") == 0
    sentences = [[("A", "O"), ("man", "B-PER"), ("is", "O"), ("riding", "O"), ("a", "O"), ("horse", "O")],
                 [("The", "O"), ("girl", "B-PER"), ("is", "O"), ("playing", "O"), ("drums", "O")]]
    (tmp_path / "tagged.txt").write_text("\n".join("".join(f"{word}\t{tag}\n" for word, tag in sentence)
                                                   for sentence in sentences) * 4)
    tasks = [("embed", "pairs.tsv", []), ("ner", "tagged.txt", ["--head", "crf"])]
    for task, data, extra in tasks + ([("rerank", "judged.tsv", [])] if cross_encoder else []):
        assert cli("train", "--task", task, "--checkpoint", backbone, "--train", tmp_path / data,
                   "--out", tmp_path / task, "--epochs", 1, *common, *extra) == 0, task
    assert load_tagger(str(tmp_path / "ner")).encoder.tokenizer.pad_token_id == pad_token_id
    assert Embedder.load(tmp_path / "embed").backbone.family == family
    if cross_encoder:
        reranker = Reranker.load(tmp_path / "rerank")
        config = json.loads((tmp_path / "rerank" / "config.json").read_text())
        assert config["architectures"] == [f"{cross_encoder}ForSequenceClassification"]
        assert reranker.logits([MEN[0]], [MEN[0]]).shape == (1,)


def assert_a_trained_reranker_is_a_cross_encoder(backbone, tmp_path):
    """`kbert train --task rerank` from the folder `backbone` writes a folder that sentence-transformers'
    `CrossEncoder` reads, scoring as kbert's `Reranker` does (≤ 1e-5)."""
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="the parity extra is not installed")
    from kbert.tasks.reranking import Reranker

    (tmp_path / "judged.tsv").write_text("".join(f"{a}\t{a}\t1\n{a}\t{b}\t0\n" for a, b in zip(MEN, WOMEN)))
    assert cli("train", "--task", "rerank", "--checkpoint", backbone, "--train", tmp_path / "judged.tsv",
               "--out", tmp_path / "rerank", "--epochs", 1, "--maxlen", 32) == 0
    pairs = list(zip(MEN, WOMEN + MEN[:1]))
    expected = sentence_transformers.CrossEncoder(str(tmp_path / "rerank"), device="cpu").predict(pairs)
    reranker = Reranker.load(tmp_path / "rerank")
    np.testing.assert_allclose(reranker.scores(reranker.logits(*zip(*pairs))), expected, atol=1e-5)


@pytest.mark.parity
def test_a_reranker_kbert_trains_is_a_cross_encoder_sentence_transformers_reads(backbone, tmp_path):
    assert_a_trained_reranker_is_a_cross_encoder(backbone, tmp_path)


@pytest.mark.examples  # a whole run (tens of seconds): CI's example step runs it
def test_kbert_serve_embeds_with_mpnet_and_reranks_with_distilbert(tmp_path):
    """The server's routes on the new backbones give what kbert gives offline."""
    pytest.importorskip("fastapi", reason="kbert serve needs FastAPI and uvicorn: pip install 'kbert[serve]'")
    from kbert.embeddings.embedder import Embedder
    from kbert.tasks.reranking import Reranker
    from test_serve import post, running_server

    folder = embedder_folder(tmp_path / "mpnet", "mpnet")
    with running_server(folder) as (url, _):
        status, answer = post(url, {"inputs": SENTENCES[:3]}, path="/embed")
    assert status == 200
    np.testing.assert_allclose(answer, Embedder.load(folder).encode(SENTENCES[:3]), atol=1e-5)

    folder = wordpiece_folder(tmp_path / "distilbert", "distilbert", head="reranker")
    with running_server(folder) as (url, _):
        status, answer = post(url, {"query": SENTENCES[0], "texts": SENTENCES[1:4]}, path="/rerank")
    assert status == 200
    scores = Reranker.load(folder).score(SENTENCES[0], SENTENCES[1:4])
    np.testing.assert_allclose([row["score"] for row in sorted(answer, key=lambda row: row["index"])], scores,
                               atol=1e-5)
