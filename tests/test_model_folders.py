"""Model folders read as they say, and refused where they say something kbert must not follow (round 5 of
docs/reliability.md): paths out of the folder, malformed settings, data that is not weights, a lower-casing the
tokenizer file does not carry, a CrossEncoder's activation, over-long lines."""

import json
import shutil

import numpy as np
import pytest

from conftest import count_opens, minilm_dir
from kbert.cli.main import main
from kbert.errors import CheckpointError, KbertError

MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
           {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]


@pytest.fixture(scope="module")
def minilm():
    from kbert.embeddings.embedder import Embedder

    return Embedder.load(minilm_dir())


def linked_minilm(folder):
    """A sentence-transformers folder of all-MiniLM-L6-v2 whose large files are links to the package's (cheap to
    make, and its settings files are its own to change)."""
    folder.mkdir()
    for source in minilm_dir().rglob("*"):
        target = folder / source.relative_to(minilm_dir())
        if source.is_dir():
            target.mkdir(exist_ok=True)
        elif source.suffix in (".safetensors", ".bin", ".onnx", ".h5", ".ot", ".msgpack"):
            target.symlink_to(source)
        else:
            shutil.copyfile(source, target)
    return folder


# --- paths a folder names stay in the folder -----------------------------------------------------------

@pytest.mark.parametrize("path", ["../elsewhere", "/abs/elsewhere", "1_Pooling/../../elsewhere", ".."])
def test_a_module_path_out_of_the_folder_is_refused(path, tmp_path):
    """Before the fix, `../elsewhere` or an absolute path loaded another folder's module without a word."""
    from kbert.embeddings.folders import read_sentence_transformer

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    folder = tmp_path / "model"
    folder.mkdir()
    modules = [MODULES[0], {**MODULES[1], "path": str(elsewhere) if path.startswith("/abs") else path}]
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(CheckpointError, match=r"modules.json: a module's path .* lies outside the model folder"):
        read_sentence_transformer(folder)


def test_a_module_path_inside_the_folder_still_reads(tmp_path):
    from kbert.embeddings.folders import read_sentence_transformer

    folder = linked_minilm(tmp_path / "model")
    modules = json.loads((folder / "modules.json").read_text())
    modules[1]["path"] = "./1_Pooling/"
    (folder / "modules.json").write_text(json.dumps(modules))
    spec = read_sentence_transformer(folder)
    assert str(spec.output) == "mean" and spec.transformer == str(folder)


# --- malformed settings are named, not tracebacks ------------------------------------------------------

@pytest.mark.parametrize("file, content, message", [
    ("modules.json", ["0_Transformer", "1_Pooling"], r"modules.json: expected a list of modules, each an object"),
    ("modules.json", [MODULES[0], {**MODULES[1], "path": None}], r"a module's path None: expected a folder name"),
    ("modules.json", [MODULES[0], {**MODULES[1], "path": 3}], r"a module's path 3: expected a folder name"),
    ("modules.json", [MODULES[0], {**MODULES[1], "idx": "1"}], r"idx '1', expected a whole number"),
    ("1_Pooling/config.json", [1, 2], r"1_Pooling/config.json: expected a JSON object of settings, got list"),
    ("1_Pooling/config.json", {"pooling_mode_mean_tokens": "false", "pooling_mode_cls_token": True},
     r"pooling_mode_mean_tokens 'false': expected true or false"),
    ("config_sentence_transformers.json", ["query: "], r"config_sentence_transformers.json: expected a JSON object"),
    ("tokenizer_config.json", ["[PAD]"], r"tokenizer_config.json: expected a JSON object of settings, got list"),
    ("sentence_bert_config.json", {"max_seq_length": -3}, r"max_seq_length -3: expected a whole number of tokens"),
    ("sentence_bert_config.json", {"max_seq_length": "64"}, r"max_seq_length '64': expected a whole number"),
    ("sentence_bert_config.json", {"max_seq_length": 64, "do_lower_case": "yes"}, r"do_lower_case 'yes': expected"),
])
def test_malformed_settings_are_named(file, content, message, tmp_path):
    """Each was an AttributeError or TypeError traceback before the fix."""
    from kbert.embeddings.embedder import Embedder

    folder = linked_minilm(tmp_path / "model")
    (folder / file).write_text(json.dumps(content))
    with pytest.raises(CheckpointError, match=message):
        Embedder.load(folder)
    assert main(["embed", "--model", str(folder), str(folder / "modules.json")]) == 2


# --- weights that are not weights ----------------------------------------------------------------------

def rewrite_tensor(path, name, change):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(path)
    tensors[name] = change(tensors[name])
    save_file(tensors, path)


@pytest.mark.parametrize("change, message", [
    (lambda value: np.where(np.arange(value.size).reshape(value.shape) == 7, np.nan, value).astype(value.dtype),
     r"embeddings.word_embeddings.weight holds NaN or infinite values"),
    (lambda value: value.view(np.int32), r"embeddings.word_embeddings.weight holds int32 data, but the model's weight"),
])
def test_weights_with_nan_or_of_integers_are_refused_and_nothing_is_half_loaded(change, message, tmp_path):
    """Before the fix, an I32 tensor of the same byte size loaded as numbers, and NaN weights gave NaN vectors
    (`kbert embed` printed NaN, which is not JSON)."""
    from kbert import build_transformer_model
    from kbert.checkpoints.hf import load_hf_weights

    folder = tmp_path / "model"
    shutil.copytree(minilm_dir(), folder)
    rewrite_tensor(folder / "model.safetensors", "embeddings.word_embeddings.weight", change)
    bert = build_transformer_model(folder / "config.json")
    before = [weight.numpy().copy() for weight in bert.weights]
    with pytest.raises(CheckpointError, match=message):
        load_hf_weights(bert, folder)
    for weight, value in zip(bert.weights, before):  # untouched: every tensor is checked before any is assigned
        np.testing.assert_array_equal(weight.numpy(), value)


def dense_folder(tmp_path, minilm, activation):
    """all-MiniLM-L6-v2 with a Dense projection of `activation` (a Keras name, None: none), saved by kbert."""
    import keras

    from kbert.embeddings.embedder import Embedder
    from kbert.embeddings.kinds import embedding_model

    keras.utils.set_random_seed(0)
    model = embedding_model(minilm.backbone, "mean")
    vectors = keras.layers.Dense(16, activation=activation, name="Embedding-Dense-0")(model.outputs[0])
    model = keras.Model(model.inputs, vectors)
    embedder = Embedder(model, minilm.tokenizer, minilm.maxlen, False, "", minilm.backbone, "mean")
    return embedder, embedder.save(tmp_path / f"dense-{activation}")


@pytest.mark.parametrize("activation, written", [(None, "torch.nn.modules.linear.Identity"),
                                                 ("tanh", "torch.nn.modules.activation.Tanh")])
def test_a_dense_is_saved_with_the_activation_torch_names(activation, written, minilm, tmp_path):
    """Before the fix, a Dense without activation (Keras's "linear") was written as
    torch.nn.modules.activation.Identity, which is not where torch keeps Identity."""
    from kbert.embeddings.embedder import Embedder

    embedder, folder = dense_folder(tmp_path, minilm, activation)
    config = json.loads((tmp_path / f"dense-{activation}" / "2_Dense" / "config.json").read_text())
    assert config["activation_function"] == written
    np.testing.assert_allclose(Embedder.load(folder).encode(["a man eats"]), embedder.encode(["a man eats"]),
                               atol=1e-6)


def test_a_dense_whose_weights_do_not_match_its_config_is_named(minilm, tmp_path):
    from kbert.embeddings.embedder import Embedder

    _, folder = dense_folder(tmp_path, minilm, "tanh")
    rewrite_tensor(tmp_path / "dense-tanh" / "2_Dense" / "model.safetensors", "linear.weight",
                   lambda value: value[:8])
    with pytest.raises(CheckpointError, match=r"2_Dense/model.safetensors: linear.weight: expected floats of shape "
                                              r"\[16, 384\].*got float32 \[8, 384\]"):
        Embedder.load(folder)


# --- sentence-transformers' do_lower_case with a tokenizer.json ---------------------------------------

def test_do_lower_case_lowers_the_text_even_with_a_tokenizer_json_and_is_saved(minilm, tmp_path):
    """sentence-transformers lower-cases the text itself when its config says do_lower_case, whatever the
    tokenizer does: a cased tokenizer.json must not undo it (before the fix: cosine 0.187 where it gives 1.0)."""
    from kbert.embeddings.embedder import Embedder

    folder = linked_minilm(tmp_path / "model")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["normalizer"]["lowercase"] = False  # a cased tokenizer file
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    cased = Embedder.load(folder)
    upper, lower = cased.encode(["HELLO World", "hello world"])
    assert float(upper @ lower) < 0.9  # the file alone keeps the case
    settings = json.loads((folder / "sentence_bert_config.json").read_text())
    (folder / "sentence_bert_config.json").write_text(json.dumps({**settings, "do_lower_case": True}))
    lowered = Embedder.load(folder)
    upper, lower = lowered.encode(["HELLO World", "hello world"])
    np.testing.assert_allclose(upper, lower, atol=1e-6)
    saved = lowered.save(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "sentence_bert_config.json").read_text())["do_lower_case"] is True
    np.testing.assert_allclose(Embedder.load(saved).encode(["HELLO World"])[0], lower, atol=1e-6)


# --- lengths ------------------------------------------------------------------------------------------

def test_a_long_line_is_tokenized_only_as_far_as_the_model_reads(minilm, tmp_path, capsys):
    """A 10 MB line cost 3.1 GB to tokenize whole before the fix; the ids of the cut are the whole text's."""
    from kbert.tokenizers.long_texts import encode_within

    words = " ".join(f"word{index % 97}" for index in range(60_000))  # ~500 KB
    assert encode_within(minilm.tokenizer, [words], 256) == minilm.tokenizer.encode_all([words], maxlen=256)
    spaced = "hello " + " " * 20_000 + "world " * 300  # the cut part holds too few tokens: read whole
    assert encode_within(minilm.tokenizer, [spaced], 256) == minilm.tokenizer.encode_all([spaced], maxlen=256)
    calls = []
    original = minilm.tokenizer.encode_all
    minilm.tokenizer.encode_all = lambda texts, *args, **kwargs: calls.append(max(map(len, texts), default=0)) or \
        original(texts, *args, **kwargs)
    try:
        minilm.encode(["x " * 5_000_000])  # 10 MB
    finally:
        del minilm.tokenizer.encode_all
    assert max(calls) <= 32 * 256


@pytest.mark.parametrize("max_seq_length", [512, None])
def test_max_seq_length_beyond_the_position_table_is_cut_to_it(max_seq_length, tmp_path, capsys):
    """Before the fix, max_seq_length 512 on a table of 64 positions failed inside PositionEmbedding.call() on
    a long text (and `kbert serve` said max_input_length 512)."""
    from conftest import xlm_roberta_embedder_folder
    from kbert.embeddings.embedder import Embedder

    folder = tmp_path / "xlmr"
    folder.mkdir()
    xlm_roberta_embedder_folder(folder, ["a tiny model of positions", "the quick brown fox"])
    settings = json.loads((folder / "sentence_bert_config.json").read_text())
    (folder / "sentence_bert_config.json").write_text(json.dumps({**settings, "max_seq_length": max_seq_length}))
    embedder = Embedder.load(folder)
    assert embedder.maxlen == 64  # 66 rows, positions counted from 2 (the padding id 1, plus 1)
    long_text = "the quick brown fox " * 100
    texts = tmp_path / "texts.txt"
    texts.write_text(long_text + "\n")
    assert main(["embed", "--model", str(folder), str(texts)]) == 0
    vector = json.loads(capsys.readouterr().out)["embedding"]
    np.testing.assert_allclose(vector, embedder.encode([long_text])[0], atol=1e-6)


def test_a_tokenizer_with_ids_beyond_the_models_vocabulary_is_named(tmp_path):
    """Before the fix, a text holding such a token failed with TensorFlow's InvalidArgumentError traceback."""
    from kbert.embeddings.embedder import Embedder

    folder = linked_minilm(tmp_path / "model")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["model"]["vocab"]["newtoken"] = 40_000
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(CheckpointError, match=r"tokenizer.json: the token 'newtoken' has id 40000, but the model has "
                                              r"30522 rows of token embeddings"):
        Embedder.load(folder)


def test_zero_width_characters_alone_are_a_blank_line(tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("a text\n\u200b\u200d\ufeff\n", encoding="utf-8")
    assert main(["embed", "--model", str(minilm_dir()), str(texts)]) == 2
    assert "line 2 is blank, or invisible characters only" in capsys.readouterr().err


# --- CrossEncoders: their activation, and sentence-transformers 6's folders ----------------------------

def cross_encoder_folder(tmp_path, settings=None, config_extra=None, labels=1):
    """A CrossEncoder folder of a random BERT written by kbert (`write_cross_encoder`), with sentence-transformers
    6's `modules.json` and `config_sentence_transformers.json` where `settings` are given."""
    import keras

    from kbert import build_transformer_model
    from kbert.tasks.reranking import reranker_model, write_cross_encoder
    from kbert.tokenizers import Tokenizer

    keras.utils.set_random_seed(1)
    folder = tmp_path / "cross-encoder"
    folder.mkdir()
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghij"]) + "\n")
    bert = build_transformer_model({"vocab_size": 15, "hidden_size": 16, "num_hidden_layers": 1,
                                    "num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 32})
    write_cross_encoder(reranker_model(bert), bert, Tokenizer(str(vocab)), 32, str(folder))
    config = json.loads((folder / "config.json").read_text())
    config.pop("sentence_transformers")
    if labels != 1:
        config["id2label"] = {str(index): f"LABEL_{index}" for index in range(labels)}
    (folder / "config.json").write_text(json.dumps({**config, **(config_extra or {})}))
    if settings is not None:
        (folder / "modules.json").write_text(json.dumps([{**MODULES[0], "type": "sentence_transformers.base.modules."
                                                                                "transformer.Transformer"}]))
        (folder / "config_sentence_transformers.json").write_text(json.dumps(
            {"model_type": "CrossEncoder", "prompts": {}, "default_prompt_name": None, **settings}))
    return folder


@pytest.mark.parametrize("settings, config_extra, activation", [
    (None, None, "sigmoid"),
    ({"activation_fn": "torch.nn.modules.linear.Identity"}, None, "identity"),
    ({"activation_fn": "torch.nn.modules.activation.Sigmoid"}, None, "sigmoid"),
    (None, {"sentence_transformers": {"activation_fn": "torch.nn.modules.linear.Identity"}}, "identity"),
    (None, {"sbert_ce_default_activation_function": "torch.nn.modules.linear.Identity"}, "identity"),
])
def test_a_cross_encoders_activation_is_applied_where_it_says(settings, config_extra, activation, tmp_path, capsys):
    """Before the fix, every reranker's score was the sigmoid of its logit (ms-marco cross-encoders give the logit
    itself), and a sentence-transformers 6 CrossEncoder folder (modules.json) was read as an embedding model."""
    from kbert.tasks.predictors import model_task
    from kbert.tasks.reranking import Reranker

    folder = cross_encoder_folder(tmp_path, settings, config_extra)
    assert model_task(str(folder)) == "rerank"
    reranker = Reranker.load(folder)
    assert reranker.activation == activation
    logits = reranker.logits(["abc", "abc"], ["abd", "jih"])
    expected = logits if activation == "identity" else 1 / (1 + np.exp(-logits))
    np.testing.assert_allclose(reranker.score("abc", ["abd", "jih"]), expected, rtol=1e-6)
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("abc\tabd\n")
    assert main(["predict", "--model", str(folder), "--json", str(pairs)]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["score"] == pytest.approx(float(expected[0]), rel=1e-5)


def test_an_activation_kbert_does_not_apply_and_several_labels_are_named(tmp_path):
    from kbert.tasks.predictors import model_task
    from kbert.tasks.reranking import Reranker

    folder = cross_encoder_folder(tmp_path, {"activation_fn": "torch.nn.modules.activation.Softmax"})
    with pytest.raises(KbertError, match=r"config_sentence_transformers.json: activation_fn "
                                         r"'torch.nn.modules.activation.Softmax' is not one kbert applies"):
        Reranker.load(folder)
    folder = cross_encoder_folder(tmp_path / "three", labels=3) if (tmp_path / "three").mkdir() is None else None
    with pytest.raises(KbertError, match=r"with 3 labels; a reranker is a ...ForSequenceClassification with one "
                                         r"label .*several labels"):
        model_task(str(folder))


# --- the same, as sentence-transformers itself reads it (CI's parity venv) ------------------------------

TEXTS = ["HELLO World", "A man is eating food.", "abc abd"]


@pytest.mark.parity
def test_sentence_transformers_reads_kbert_dense_and_lower_casing_as_kbert_does(minilm, tmp_path):
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install '.[parity]' (with "
                                                "CPU torch) for the parity tests")
    from kbert.embeddings.embedder import Embedder

    embedder, folder = dense_folder(tmp_path, minilm, None)
    theirs = sentence_transformers.SentenceTransformer(folder, device="cpu").encode(TEXTS)
    np.testing.assert_allclose(theirs, embedder.encode(TEXTS), atol=1e-5)
    cased = linked_minilm(tmp_path / "cased")
    tokenizer = json.loads((cased / "tokenizer.json").read_text())
    tokenizer["normalizer"]["lowercase"] = False
    (cased / "tokenizer.json").write_text(json.dumps(tokenizer))
    settings = json.loads((cased / "sentence_bert_config.json").read_text())
    (cased / "sentence_bert_config.json").write_text(json.dumps({**settings, "do_lower_case": True}))
    theirs = sentence_transformers.SentenceTransformer(str(cased), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(theirs, Embedder.load(cased).encode(TEXTS), atol=1e-5)


@pytest.mark.parity
@pytest.mark.parametrize("activation", ["Identity", "Sigmoid"])
def test_a_sentence_transformers_6_cross_encoder_scores_as_kbert(activation, tmp_path):
    torch = pytest.importorskip("torch", reason="pip install '.[parity]' (with CPU torch) for the parity tests")
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install '.[parity]'")
    from kbert.tasks.reranking import Reranker

    source = cross_encoder_folder(tmp_path)
    cross_encoder = sentence_transformers.CrossEncoder(str(source), device="cpu",
                                                       activation_fn=getattr(torch.nn, activation)())
    cross_encoder.save(str(tmp_path / "saved"))
    reranker = Reranker.load(tmp_path / "saved")
    assert reranker.activation == activation.lower()
    pairs = [("abc", "abd"), ("abc", "jih"), ("fed", "def")]
    np.testing.assert_allclose(reranker.score("abc", ["abd", "jih"]), cross_encoder.predict(pairs[:2]), atol=1e-5)


def test_vectors_that_overflow_are_refused_by_kbert_embed_and_the_server(minilm, tmp_path, capsys):
    """Before the fix, `kbert embed` printed NaN (not JSON), the base64 route answered 200 with NaN bytes and the
    float routes a bare 500. Weights of 3e38 are finite (so they load), but their products overflow."""
    pytest.importorskip("fastapi", reason="pip install 'kbert[serve]'")
    from starlette.testclient import TestClient

    from kbert.serving import ServerLimits, create_app
    from kbert.embeddings.embedder import Embedder
    from kbert.tasks.predictors import PredictionSettings, embedding_predictor

    _, folder = dense_folder(tmp_path, minilm, None)
    rewrite_tensor(tmp_path / "dense-None" / "2_Dense" / "model.safetensors", "linear.weight",
                   lambda value: np.full_like(value, 3e38))
    texts = tmp_path / "texts.txt"
    texts.write_text("a text\nanother\n")
    assert main(["embed", "--model", folder, str(texts)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "line 1 (2 lines in all) gave NaN or infinite values" in captured.err
    app = create_app(embedding_predictor(folder, PredictionSettings(), Embedder.load(folder)),
                     ServerLimits(max_wait_ms=1))
    with TestClient(app) as client:
        for path, body, message in [("/v1/embeddings", {"input": "a text", "encoding_format": "base64"},
                                     lambda answer: answer["error"]["message"]),
                                    ("/embed", {"inputs": "a text"}, lambda answer: answer["error"]),
                                    ("/v1/predict", {"texts": ["a text"]}, lambda answer: answer["detail"])]:
            answer = client.post(path, json=body)
            assert answer.status_code in (422, 500) and "NaN or infinite values" in message(answer.json()), path


# --- a folder read once (issue 86) ----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["sentence-transformers", "cross-encoder"])
def test_loading_a_folder_for_prediction_reads_each_of_its_files_once(tmp_path, monkeypatch, kind):
    """`load_predictor` (what `kbert predict` and `kbert serve` load with) decides what a folder holds and loads
    it from one `ModelFolder`: each JSON file of the folder is opened once. Before, all-MiniLM-L6-v2's
    `config_sentence_transformers.json` was opened three times and its `config.json` twice; a sentence-transformers
    6 CrossEncoder's `config.json` five times, its settings and `tokenizer_config.json` twice each."""
    from kbert.tasks.predictors import load_predictor

    folder = str(minilm_dir() if kind == "sentence-transformers" else cross_encoder_folder(tmp_path, settings={}))
    opened = count_opens(monkeypatch, folder)
    predictor = load_predictor(folder)
    assert predictor.task == ("embed" if kind == "sentence-transformers" else "rerank")
    assert "config.json" in opened and set(opened.values()) == {1}, dict(opened)
