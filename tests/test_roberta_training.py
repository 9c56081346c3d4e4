"""`kbert train` on Hugging Face's RoBERTa / XLM-R (`hf_roberta`): its own tokenizer.json, batches padded with its
<pad> (id 1; its 0 is <s>, a token the model reads), and model directories that read back the same way."""

import json

import numpy as np
import pytest

from conftest import shared_path, write, xlm_roberta_embedder_folder
from kbert.cli.main import main

MEN = ["A man is eating food.", "A man is riding a horse.", "Two men pushed carts through the woods.",
       "A man is eating a piece of bread.", "A man is riding a white horse on an enclosed ground."]
WOMEN = ["A woman is playing violin.", "The girl is carrying a baby.", "A woman is eating food.",
         "The girl is playing drums.", "A woman is riding a horse."]


@pytest.fixture(scope="module")
def xlmr(tmp_path_factory):
    """A random XLM-R (2 blocks, H 32) with a byte-level BPE tokenizer.json, as a Hugging Face folder."""
    return xlm_roberta_embedder_folder(tmp_path_factory.mktemp("xlmr"), MEN + WOMEN)


def train(xlmr, tmp_path, data: str, *options: str) -> int:
    path = write(tmp_path, "train.tsv", data)
    return main(["train", "--checkpoint", str(xlmr), "--train", str(path), "--valid", str(path),
                 "--out", str(tmp_path / "run"), "--maxlen", "32", *options])


def test_an_xlm_r_classifier_trains_on_its_own_tokenizer_and_pads_with_its_pad(xlmr, tmp_path):
    from kbert.tasks.classification import load_classifier
    from kbert.tokenizers.tokenizer_json import TokenizerJson
    from kbert.training.data import Example

    rows = [f"{text}\t1" for text in MEN] * 4 + [f"{text}\t0" for text in WOMEN] * 4
    rows = [rows[index] for index in np.random.default_rng(0).permutation(len(rows))]
    assert train(xlmr, tmp_path, "\n".join(rows) + "\n", "--epochs", "8", "--batch-size", "8", "--lr", "3e-3") == 0
    run = tmp_path / "run"
    assert (run / "tokenizer.json").read_bytes() == (xlmr / "tokenizer.json").read_bytes()
    assert not (run / "vocab.txt").exists()
    state = json.loads((run / "training.json").read_text())
    assert state["options"]["model"] == "hf_roberta" and state["best_val_accuracy"] == 1.0

    classifier = load_classifier(str(run))
    assert isinstance(classifier.tokenizer, TokenizerJson) and classifier.tokenizer.pad_token_id == 1
    texts = MEN[:2] + WOMEN[:2] + ["A man."]  # of several lengths: one batch pads the shorter ones
    examples = [Example(text, None, None, line) for line, text in enumerate(texts, 1)]
    together = classifier.predict_proba(examples, batch_size=len(texts), bucketing=False)
    alone = np.concatenate([classifier.predict_proba([example]) for example in examples])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    assert [row["label"] for row in classifier.labelled(texts[:4])] == ["1", "1", "0", "0"]


def test_the_training_batches_pad_token_ids_with_pad_and_the_rest_with_zero(xlmr):
    from kbert.tasks.classification import ClassificationTask
    from kbert.tokenizers.tokenizer_json import TokenizerJson
    from kbert.training.options import TrainingOptions
    import keras

    tokenizer = TokenizerJson(xlmr / "tokenizer.json")
    data = ClassificationTask().read(tokenizer, str(write(xlmr.parent, "pairs.tsv", "".join(
        f"{man}\t{woman}\t1\n{woman}\t{man}\t0\n" for man, woman in zip(MEN, WOMEN)))), None, None,
        TrainingOptions(maxlen=32, batch_size=10, shuffle=False))
    (tokens, segments), _ = next(iter(data.train))
    tokens, segments = keras.ops.convert_to_numpy(tokens), keras.ops.convert_to_numpy(segments)
    lengths = [len(ids) for ids, _ in tokenizer.encode_all(MEN, WOMEN, maxlen=32)]
    assert tokens.shape[1] > min(lengths)  # some rows are padded
    for row, length in zip(tokens[0::2], lengths):
        assert row[length - 1] == 2 and set(row[length:].tolist()) <= {-2}  # -1 - <pad>: hidden by length
    assert not segments.any()


def test_a_contrastive_batch_gives_each_text_the_vector_it_has_alone(xlmr):
    """The views' token ids, padded in the batch and again where they are stacked for one encoder call, are
    padded with <pad>: each text's vector in the training model is its own."""
    import keras

    from kbert import build_transformer_model
    from kbert.embeddings.embedder import Embedder
    from kbert.tasks.embedding import EmbeddingTask
    from kbert.tokenizers.tokenizer_json import TokenizerJson
    from kbert.training.options import TrainingOptions

    options = TrainingOptions(task="embed", maxlen=32, batch_size=5, shuffle=False)
    task, tokenizer = EmbeddingTask(options), TokenizerJson(xlmr / "tokenizer.json")
    pairs = write(xlmr.parent, "views.tsv", "".join(f"{man}\t{woman}\n" for man, woman in zip(MEN, WOMEN)))
    data = task.read(tokenizer, str(pairs), None, None, options)
    bert = build_transformer_model(xlmr / "config.json", xlmr, padding=tokenizer.padding)
    model = task.build(bert, 0, options)
    features, _ = next(iter(data.train))
    vectors = keras.ops.convert_to_numpy(task.training_model(model).predict_on_batch(list(features)))
    embedder = Embedder(model, tokenizer, 32, True, "", bert, task.pooling)
    for view, texts in enumerate((MEN, WOMEN)):
        alone = np.concatenate([embedder.encode([text]) for text in texts])
        np.testing.assert_allclose(vectors[:, view], alone, atol=1e-5)


@pytest.mark.parity
def test_an_xlm_r_embedding_model_trains_and_is_a_sentence_transformers_folder(xlmr, tmp_path):
    from kbert.embeddings.embedder import Embedder

    pairs = "".join(f"{man}\t{woman}\n" for man, woman in zip(MEN, WOMEN)) * 2
    assert train(xlmr, tmp_path, pairs, "--task", "embed", "--epochs", "2", "--batch-size", "4") == 0
    run = tmp_path / "run"
    assert json.loads((run / "config.json").read_text())["model_type"] == "xlm-roberta"
    assert json.loads((run / "tokenizer_config.json").read_text())["tokenizer_class"] == "RobertaTokenizer"
    embedder = Embedder.load(run)
    assert embedder.backbone.family == "hf_roberta" and embedder.tokenizer.pad_token_id == 1
    together = embedder.encode(MEN + WOMEN, batch_size=len(MEN + WOMEN), bucketing=False)
    np.testing.assert_allclose(together, np.concatenate([embedder.encode([text]) for text in MEN + WOMEN]),
                               atol=1e-5)
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install sentence-transformers "
                                                "(with torch) for the parity check")
    reference = sentence_transformers.SentenceTransformer(str(run), device="cpu").encode(MEN + WOMEN)
    assert np.abs(together - reference).max() <= 1e-5


@pytest.mark.parity
def test_an_xlm_r_reranker_trains_and_is_a_cross_encoder_folder(xlmr, tmp_path):
    """Query and passage pairs padded with <pad>; the directory is an `XLMRobertaForSequenceClassification` of
    one label with its tokenizer.json, which transformers and CrossEncoder score as kbert does."""
    from kbert.tasks.reranking import Reranker

    pairs = "".join(f"who is a man\t{man}\t1\nwho is a man\t{woman}\t0\n" for man, woman in zip(MEN, WOMEN))
    assert train(xlmr, tmp_path, pairs, "--task", "rerank", "--epochs", "1", "--batch-size", "4") == 0
    run = tmp_path / "run"
    config = json.loads((run / "config.json").read_text())
    assert config["architectures"] == ["XLMRobertaForSequenceClassification"] and config["model_type"] == "xlm-roberta"
    reranker = Reranker.load(run)
    assert reranker.tokenizer.pad_token_id == 1
    together = reranker.score("who is a man", MEN + WOMEN, batch_size=len(MEN + WOMEN), raw=True)
    np.testing.assert_allclose(together, [reranker.score("who is a man", [text], raw=True)[0]
                                          for text in MEN + WOMEN], atol=1e-5)
    transformers = pytest.importorskip("transformers", reason="transformers (with torch) for the parity check")
    import torch

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(run))
    model, info = transformers.AutoModelForSequenceClassification.from_pretrained(str(run), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    features = tokenizer(["who is a man"] * len(MEN + WOMEN), MEN + WOMEN, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model.eval()(**features).logits[:, 0].numpy()
    np.testing.assert_allclose(together, logits, atol=1e-4)


@pytest.mark.examples
def test_an_xlm_r_tagger_trains_on_words_and_finds_entities_by_character(xlmr, tmp_path):
    """Each word is tokenized on its own (byte-level pieces, several a word) and its tag covers its pieces;
    chunks are padded with <pad>, so a sentence's entities do not depend on the batch it is in."""
    from kbert.tasks.ner import load_tagger, predict

    sentences = [[("A", "O"), ("man", "B-PER"), ("is", "O"), ("riding", "O"), ("a", "O"), ("horse", "O")],
                 [("The", "O"), ("girl", "B-PER"), ("is", "O"), ("playing", "O"), ("drums", "O")],
                 [("A", "O"), ("woman", "B-PER"), ("is", "O"), ("eating", "O"), ("food", "O")]]
    data = "\n".join("".join(f"{word}\t{tag}\n" for word, tag in sentence) for sentence in sentences) * 8
    assert train(xlmr, tmp_path, data, "--task", "ner", "--head", "softmax", "--epochs", "12", "--batch-size", "8",
                 "--lr", "3e-3") == 0
    run = tmp_path / "run"
    assert (run / "tokenizer.json").exists() and not (run / "vocab.txt").exists()
    tagger = load_tagger(str(run))
    assert tagger.encoder.tokenizer.pad_token_id == 1
    words = [[word for word, _ in sentence] for sentence in sentences]
    chunks = [tagger.encoder.chunks(units)[0] for units in words]
    (rows, features), = tagger.batches(chunks, len(chunks), bucketing=False)
    together = tagger.model.predict_on_batch(list(features))
    for row, chunk in zip(rows, chunks):
        (_, alone), = tagger.batches([chunk])
        size = len(chunk.token_ids)
        alone = tagger.model.predict_on_batch(list(alone))[0, :size]  # JAX pads a lone chunk to 16 tokens too
        np.testing.assert_allclose(together[row, :size], alone, atol=1e-5)
    assert tagger.entities(words, batch_size=len(words)) == [[("PER", 1, 2)]] * 3
    found = predict(str(run), ["A man is riding a horse"])[0]
    assert [(entity["type"], entity["text"], entity["start"]) for entity in found] == [("PER", "man", 2)]


@pytest.mark.examples  # a whole run (tens of seconds): CI's example step runs it
def test_xlm_r_pre_trains_with_its_mask_and_pad_then_fine_tunes_from_what_it_wrote(xlmr, tmp_path, capsys):
    """Whole words by the pieces' space marks (`Ġ`), masked with <mask>, the last row padded with <pad>; the
    directory holds Hugging Face's safetensors (there is no Google checkpoint of RoBERTa), fills masks with
    decoded pieces, and is a checkpoint `kbert train` fine-tunes."""
    from kbert.tasks.pretraining import MaskedLanguageModelTask, tokenize_words
    from kbert.tokenizers.tokenizer_json import TokenizerJson
    from kbert.training.options import TrainingOptions

    tokenizer = TokenizerJson(xlmr / "tokenizer.json")
    (ids, words), = tokenize_words(tokenizer, ["A man is riding a horse."], "wordpiece")
    pieces = [tokenizer.id_to_token(int(index)) for index in ids]
    starts = [index == 0 or piece.startswith("Ġ") for index, piece in enumerate(pieces)]
    assert words.tolist() == (np.cumsum(starts) - 1).tolist() and len(set(words.tolist())) < len(ids)
    corpus = write(tmp_path, "corpus.txt", "\n".join(MEN + WOMEN) * 3 + "\n")
    options = TrainingOptions(task="mlm", model="hf_roberta", whole_word="wordpiece", pack="none", maxlen=32,
                              batch_size=64)
    data = MaskedLanguageModelTask.from_options(options).read(tokenizer, str(corpus), None, None, options)
    inputs, labels, weights = data.train[0]
    masked_ids = inputs["Input-Token"]
    assert (masked_ids == tokenizer.mask_id).any() and (masked_ids[:, 0] == tokenizer.cls_id).all()
    for row in masked_ids:  # one line a row: </s>, then <pad>'s negative id to the end
        end = np.flatnonzero(row == tokenizer.sep_id)[-1] + 1
        assert end < len(row) and (row[end:] == tokenizer.pad_id).all() and tokenizer.pad_id == -1 - 1

    out = tmp_path / "pretrained"
    assert main(["pretrain", "--config", str(xlmr / "config.json"), "--vocab", str(xlmr / "tokenizer.json"),
                 "--train", str(corpus), "--out", str(out), "--maxlen", "32", "--whole-word", "wordpiece",
                 "--epochs", "2", "--batch-size", "4"]) == 0
    assert (out / "model.safetensors").exists() and not (out / "bert_model.ckpt.index").exists()
    capsys.readouterr()
    assert main(["predict", "--model", str(out), "--json", str(write(tmp_path, "masked.txt",
                                                                       "A man is [MASK] food.\n"))]) == 0
    candidates = json.loads(capsys.readouterr().out.splitlines()[0])["masks"][0]["candidates"]
    assert len(candidates) == 5 and not any(candidate["token"].startswith("Ġ") for candidate in candidates)
    data = write(tmp_path, "labelled.tsv", "".join(f"{man}\t1\n{woman}\t0\n" for man, woman in zip(MEN, WOMEN)))
    assert main(["train", "--checkpoint", str(out), "--train", str(data), "--out", str(tmp_path / "tuned"),
                 "--maxlen", "32", "--epochs", "1"]) == 0


def test_xlm_r_refuses_a_wordpiece_vocabulary_and_the_tasks_that_read_wordpiece(xlmr, tmp_path, capsys):
    data = "".join(f"{text}\t1\n{other}\t0\n" for text, other in zip(MEN, WOMEN))
    assert train(xlmr, tmp_path, data, "--vocab", str(shared_path("vocab", "chinese_vocab.txt"))) != 0
    assert "is tokenized by its own tokenizer.json (its padding id and its pieces" in capsys.readouterr().err
    assert train(xlmr, tmp_path, data, "--vocab", str(write(tmp_path, "other.json", '{"a": 1}'))) != 0
    assert "other.json: not a Hugging Face tokenizer.json (" in capsys.readouterr().err
    pairs = write(tmp_path, "pairs.tsv", "".join(f"{man}\t{woman}\n" for man, woman in zip(MEN, WOMEN)))
    code = main(["train", "--task", "seq2seq", "--checkpoint", str(xlmr), "--train", str(pairs), "--maxlen", "32",
                 "--out", str(tmp_path / "seq2seq")])
    assert code != 0 and "is an encoder only, and --task seq2seq needs a decoder" in capsys.readouterr().err
    assert not (tmp_path / "run").exists() and not (tmp_path / "seq2seq").exists()
