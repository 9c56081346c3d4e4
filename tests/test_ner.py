"""The NER task: units and WordPiece chunks, targets, training, evaluation and prediction on real MSRA data."""

import json

import keras
import numpy as np
import pytest

from conftest import CONFIGS, kbert_in_process, shared_path, write
from kbert import DataError, KbertError, Tokenizer
from kbert.training.data import LabelMap
from kbert.training.losses import global_pointer_crossentropy
from kbert.training.options import TrainingOptions
from kbert.tasks.labelling import read_tagged, spans
from kbert.tasks.ner import (Examples, NerTask, SpanCrossEntropy, Tagger, UnitEncoder, chunk_entities,
                             scheme_tags, split_units)


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer(shared_path("vocab", "chinese_vocab.txt"))


@pytest.fixture(scope="module")
def msra_dev():
    return read_tagged(shared_path("data", "msra_ner", "msra.dev.bmes"))[0]


def test_one_token_per_chinese_character(tokenizer, msra_dev):
    encoder = UnitEncoder(tokenizer, maxlen=128)
    for sentence in msra_dev[:500]:
        (chunk,) = encoder.chunks(sentence.tokens)
        assert chunk.owners == list(range(len(sentence.tokens)))
        assert chunk.token_ids[0] == tokenizer.cls_id and chunk.token_ids[-1] == tokenizer.sep_id
    # Digits written as characters stay one token each (a whole-text tokenizer makes "1997" one piece).
    (chunk,) = encoder.chunks(list("1997年"))
    assert tokenizer.ids_to_tokens(chunk.token_ids) == ["[CLS]", "1", "9", "9", "7", "年", "[SEP]"]
    # A unit that normalizes to nothing (a lone combining mark) keeps its place as [UNK].
    assert encoder.pieces(["\u0301"]) == [[tokenizer.token_to_id("[UNK]")]]


def test_long_sentences_are_cut_between_units(tokenizer):
    encoder = UnitEncoder(tokenizer, maxlen=8)
    units = list("中华人民共和国国务院总理") + ["playing"]
    chunks = encoder.chunks(units)
    assert all(len(chunk.token_ids) <= 8 for chunk in chunks)
    assert [chunk.start for chunk in chunks] == [0, 6, 12]
    assert sum(chunk.size for chunk in chunks) == len(units)
    assert tokenizer.ids_to_tokens(chunks[-1].token_ids) == ["[CLS]", "play", "##ing", "[SEP]"]
    # An entity across a cut is clipped to each chunk.
    assert chunk_entities(chunks[0], [("ORG", 4, 9)]) == [("ORG", 4, 6)]
    assert chunk_entities(chunks[1], [("ORG", 4, 9)]) == [("ORG", 0, 3)]


def test_word_units_cover_all_their_pieces():
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "john": 4, "lives": 5, "in": 6, "new": 7,
             "york": 8, "##shire": 9}
    encoder = UnitEncoder(Tokenizer(vocab), maxlen=32)
    (chunk,) = encoder.chunks(["John", "lives", "in", "Yorkshire"])
    assert chunk.owners == [0, 1, 2, 3, 3]
    examples = Examples(encoder, LabelMap(scheme_tags(["LOC", "PER"], "BIO")), "BIO", "crf")
    target = examples._target(chunk, chunk_entities(chunk, [("PER", 0, 1), ("LOC", 3, 4)]))
    assert [examples.labels.names[i] for i in target] == ["O", "B-PER", "O", "O", "B-LOC", "I-LOC", "O"]
    assert split_units("John  lives in\tYorkshire", "word") == [(0, 4), (6, 11), (12, 14), (15, 24)]


@pytest.mark.parametrize("head", ["crf", "global_pointer"])
@pytest.mark.parametrize("maxlen", [128, 16])
def test_targets_decode_back_to_the_gold_entities(tokenizer, msra_dev, head, maxlen):
    """Encoding then decoding the gold targets gives the gold entities: the alignment loses nothing."""
    types = ["LOC", "ORG", "PER"]
    labels = LabelMap(types if head == "global_pointer" else scheme_tags(types, "BMES"))
    encoder = UnitEncoder(tokenizer, maxlen)
    examples = Examples(encoder, labels, "BMES", head)
    tagger = Tagger(None, encoder, labels, {"head": head, "unit": "char"})
    clipped = 0
    for sentence in msra_dev:
        gold = spans(sentence.tags)
        found, expected = [], []
        for chunk in encoder.chunks(sentence.tokens):
            found += tagger._spans(chunk, examples._target(chunk, chunk_entities(chunk, gold)))
            end = chunk.start + chunk.size  # an entity across a cut is found clipped to each chunk
            expected += [(kind, max(start, chunk.start), min(stop, end)) for kind, start, stop in gold
                         if start < end and stop > chunk.start]
        assert sorted(set(found)) == sorted(set(expected)), sentence.line
        clipped += len(expected) - len(gold)
    assert (clipped == 0) == (maxlen == 128)


def test_span_loss_equals_the_dense_global_pointer_loss():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 6, 6)).astype("float32")
    rows = [[[0, 1, 2], [2, 3, 3]], [[1, 4, 5]]]
    dense = np.zeros_like(logits)
    for example, entities in enumerate(rows):
        for kind, first, last in entities:
            dense[example, kind, first, last] = 1
    padded = np.full((2, 2, 3), -1)
    for example, entities in enumerate(rows):
        padded[example, :len(entities)] = entities
    expected = float(keras.ops.convert_to_numpy(global_pointer_crossentropy(dense, logits)).mean())
    assert float(SpanCrossEntropy()(padded, logits)) == pytest.approx(expected, rel=1e-6)


def test_reader_errors_name_the_file(tmp_path, tokenizer):
    options = TrainingOptions(task="ner", maxlen=32)
    plain = write(tmp_path, "plain.bmes", "我\tO\n们\tO\n")
    with pytest.raises(DataError, match=f"{plain}: no entities: every tag is O"):
        NerTask("crf").read(tokenizer, str(plain), None, None, options)
    train = write(tmp_path, "train.bmes", "张\tB-PER\n小\tM-PER\n三\tE-PER\n")
    valid = write(tmp_path, "valid.bmes", "好\tO\n\n北\tB-LOC\n京\tE-LOC\n")
    with pytest.raises(DataError, match=f"{valid}, line 3: entity type 'LOC' is not among the training "
                                        r"data's \(PER\)"):
        NerTask("crf").read(tokenizer, str(train), str(valid), None, options)
    with pytest.raises(DataError, match=r"the data makes 5 labels \(O, B-PER, M-PER, E-PER, S-PER\) but "
                                        "--num-labels is 3"):
        NerTask("crf").read(tokenizer, str(train), None, 3, options)
    with pytest.raises(KbertError, match="unknown head 'lstm'; expected one of crf, softmax, global_pointer"):
        NerTask("lstm")


kbert = kbert_in_process


@pytest.fixture(scope="module")
def msra_slices(tmp_path_factory):
    """The first 300 training and 100 test sentences of MSRA."""
    directory = tmp_path_factory.mktemp("msra")
    for split, count in (("train", 300), ("test", 100)):
        blocks = shared_path("data", "msra_ner", f"msra.{split}.bmes").read_text(encoding="utf-8").split("\n\n")
        (directory / f"{split}.bmes").write_text("\n\n".join(blocks[:count]) + "\n", encoding="utf-8")
    return directory


@pytest.mark.examples
@pytest.mark.parametrize("head", ["crf", "softmax", "global_pointer"])
def test_train_evaluate_predict_from_the_command_line(msra_slices, tmp_path, head):
    out = tmp_path / "tagger"
    result = kbert("train", "--task", "ner", "--head", head, "--config", CONFIGS / "bert_tiny.json", "--vocab",
                   shared_path("vocab", "chinese_vocab.txt"), "--train", msra_slices / "train.bmes", "--valid",
                   msra_slices / "test.bmes", "--epochs", "2", "--batch-size", "16", "--maxlen", "64", "--lr",
                   "1e-3", "--out", out)
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((out / "training.json").read_text())
    assert (state["task"], state["head"], state["scheme"], state["unit"], state["types"]) == (
        "ner", head, "BMES", "char", ["LOC", "ORG", "PER"])
    assert f"validation entity F1 {state['best_val_entity_f1']:.4f})" in result.stdout
    labels = json.loads((out / "labels.json").read_text())
    assert labels == (["LOC", "ORG", "PER"] if head == "global_pointer" else scheme_tags(state["types"], "BMES"))

    result = kbert("evaluate", "--model", out, "--data", msra_slices / "test.bmes", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    scores = json.loads(result.stdout)["scores"]
    # The kept epoch's validation F1 is what evaluating the saved model on the same file gives.
    assert scores["overall"]["f1"] == pytest.approx(state["best_val_entity_f1"], abs=1e-9)
    truth = [spans(sentence.tags) for sentence in read_tagged(msra_slices / "test.bmes")[0]]
    assert scores["overall"]["support"] == sum(map(len, truth))
    table = kbert("evaluate", "--model", out, "--data", msra_slices / "test.bmes", "--task", "ner").stdout
    assert [line.split()[0] for line in table.splitlines()[3:]] == ["type", "LOC", "ORG", "PER", "overall"]

    texts = ["  新华社北京电 国务院总理李鹏今天会见了美国客人。", "没有实体"]
    result = kbert("predict", "--model", out, "--json", stdin="\n".join(texts))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["text"] for row in rows] == texts
    for row in rows:
        for entity in row["entities"]:  # offsets index the input text
            assert row["text"][entity["start"]:entity["end"]] == entity["text"] != ""
    plain = kbert("predict", "--model", out, stdin="\n".join(texts)).stdout
    lines = [f"{e['type']}\t{e['start']}\t{e['end']}\t{e['text']}" for e in rows[0]["entities"]]
    lines += [""] + [f"{e['type']}\t{e['start']}\t{e['end']}\t{e['text']}" for e in rows[1]["entities"]] + [""]
    assert plain.splitlines() == lines


def test_a_tagger_is_not_a_classifier(msra_slices, tmp_path):
    out = tmp_path / "tagger"
    result = kbert("train", "--task", "ner", "--config", CONFIGS / "bert_tiny.json", "--vocab",
                   shared_path("vocab", "chinese_vocab.txt"), "--train", msra_slices / "train.bmes",
                   "--epochs", "1", "--maxlen", "64", "--out", out)
    assert result.returncode == 0, result.stderr[-3000:]
    result = kbert("evaluate", "--model", out, "--data", msra_slices / "test.bmes", "--task", "classify")
    assert result.returncode == 2
    assert result.stderr == f"kbert: error: {out}: a model trained for --task ner, not classify\n"
    from kbert.tasks.classification import load_classifier

    with pytest.raises(KbertError, match="a model trained for --task ner, not classify"):
        load_classifier(str(out))
