"""`kbert pretrain`: packing, whole-word masking against jieba's segmentation, the MLM head on the masked
positions (equal to the whole model's output there), `TakePositions`' layer contract, and a tiny
pre-training end to end whose checkpoint loads and predicts masked characters better than chance."""

import dataclasses
import json
import shutil

import jieba
import numpy as np
import pytest

import keras
import kbert
from kbert.builder import build_masked_lm, build_transformer_model
from kbert.cli import main
from kbert.layers import TakePositions
from kbert.models import naming
from kbert.tasks.pretraining import read_text, tokenize_words
from kbert.tokenizers import Tokenizer
from kbert.tokenizers.wordpiece import pad_batch
from kbert.training.masking import (NOT_A_WORD, TRAINING, MaskedBatches, mask_generator, mask_whole_words,
                                   max_predictions, pack_documents, pack_sequences, prediction_slots)

from conftest import CONFIGS, shared_path, write

TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
        "max_position_embeddings": 64, "vocab_size": 21128, "type_vocab_size": 2, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "initializer_range": 0.02}


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer(shared_path("vocab", "chinese_vocab.txt"))


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    """600 training and 100 held-out reviews of the real sentiment corpus, labels dropped."""
    directory = tmp_path_factory.mktemp("reviews")
    texts = {}
    for split, count in (("train", 600), ("valid", 100)):
        with open(shared_path("data", "sentiment", f"sentiment.{split}.data"), encoding="utf-8") as handle:
            texts[split] = [line.rsplit("\t", 1)[0].strip() for line, _ in zip(handle, range(count))]
        write(directory, f"{split}.txt", "".join(f"{text}\n" for text in texts[split]))
    return directory, texts


def test_take_positions_layer_contract(tmp_path):
    states = keras.Input((None, 4))
    positions = keras.Input((3,), dtype="int32")
    layer = TakePositions(name="take")
    taken = layer([keras.layers.Masking()(states), positions])
    assert taken.shape == (None, 3, 4) and getattr(taken, "_keras_mask", None) is None
    model = keras.Model([states, positions], taken)
    x = np.random.default_rng(0).normal(size=(2, 5, 4)).astype("float32")
    where = np.array([[4, 0, 0], [1, 3, 2]])
    np.testing.assert_array_equal(model.predict([x, where], verbose=0), x[np.arange(2)[:, None], where])
    assert TakePositions.from_config(layer.get_config()).get_config() == layer.get_config()
    model.save(tmp_path / "take.keras")
    loaded = keras.saving.load_model(tmp_path / "take.keras", safe_mode=True)
    np.testing.assert_array_equal(loaded.predict([x, where], verbose=0), x[np.arange(2)[:, None], where])


def test_packing_fills_sequences_and_splits_long_lines():
    lines = [(np.arange(10, 20), np.repeat(np.arange(5), 2)), (np.array([30, 31]), np.array([0, 1]))]
    tokens, words = pack_sequences(lines, maxlen=8, cls_id=1, sep_id=2)
    # The 10-token line fills the first sequence (6 tokens and [SEP]) and continues in the second;
    # the next line's first token ends that one and its second starts the third.
    assert tokens.tolist() == [[1, 10, 11, 12, 13, 14, 15, 2], [1, 16, 17, 18, 19, 2, 30, 2],
                               [1, 31, 2, 0, 0, 0, 0, 0]]
    assert words.tolist() == [[-1, 0, 0, 1, 1, 2, 2, -1], [-1, 0, 0, 1, 1, -1, 2, -1],
                              [-1, 0, -1, -1, -1, -1, -1, -1]]


def test_words_are_jiebas_and_masks_take_whole_words(tokenizer):
    text = "我们在北京大学学习自然语言处理，感觉非常好。服务员态度很好，下次还会选这里"
    (ids, words), = tokenize_words(tokenizer, [text], "jieba")
    segmentation = [word for word in jieba.lcut(text)]
    assert len(segmentation) == words.max() + 1
    for number, word in enumerate(segmentation):
        assert tokenizer.decode(ids[words == number].tolist()).replace(" ", "") == word
    tokens, word_ids = pack_sequences([(ids, words)], maxlen=64, cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id)
    budget = max_predictions(64, 0.15)
    mask_id = tokenizer.token_to_id("[MASK]")
    replaced = kept = masked_count = 0
    for seed in range(200):
        masked, positions, labels, weights = mask_whole_words(
            tokens[0], word_ids[0], mask_generator(0, TRAINING, 0, seed), rate=0.15, mask_id=mask_id,
            vocab_size=21128)
        count = int(weights.sum())
        chosen = positions[:count]
        assert 1 <= count <= budget and weights[count:].sum() == 0
        assert len(set(chosen.tolist())) == count
        # Whole words: every token of a chosen word is chosen, and nothing else.
        chosen_words = set(word_ids[0][chosen].tolist())
        assert NOT_A_WORD not in chosen_words
        assert sorted(chosen.tolist()) == np.flatnonzero(np.isin(word_ids[0], list(chosen_words))).tolist()
        np.testing.assert_array_equal(labels[:count], tokens[0][chosen])
        untouched = np.setdiff1d(np.arange(64), chosen)
        np.testing.assert_array_equal(masked[untouched], tokens[0][untouched])
        masked_count += count
        replaced += int((masked[chosen] == mask_id).sum())
        kept += int((masked[chosen] == tokens[0][chosen]).sum())
    real = int((word_ids[0] >= 0).sum())
    assert 0.10 < masked_count / 200 / real <= 0.15 + 1e-9
    assert abs(replaced / masked_count - 0.8) < 0.05 and abs(kept / masked_count - 0.1) < 0.04


def test_wordpiece_and_single_token_words(tokenizer):
    (ids, words), = tokenize_words(tokenizer, ["unbelievable 好"], "wordpiece")
    pieces = tokenizer.ids_to_tokens(ids.tolist())
    assert pieces[1].startswith("##") and words.tolist() == [0] * (len(pieces) - 1) + [1]
    (_, single), = tokenize_words(tokenizer, ["北京大学"], "none")
    assert single.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("family", ["bert", "roformer", "albert", "nezha"])
def test_masked_lm_on_positions_equals_the_whole_model_there(family):
    keras.utils.set_random_seed(1)
    bert = build_transformer_model(dict(TINY, embedding_size=32), model=family, with_mlm="linear")
    model = build_masked_lm(bert, max_predictions=4)
    assert model.count_params() == bert.count_params()
    ids = np.array([[101, 2769, 812, 1762, 1266, 776, 102, 0], [101, 3837, 3837, 102, 0, 0, 0, 0]])
    positions = np.array([[1, 5, 2, 2], [2, 1, 0, 3]])
    segments = np.zeros_like(ids)
    whole = bert.predict([ids, segments], verbose=0)
    taken = model.predict([ids, segments, positions], verbose=0)
    np.testing.assert_allclose(taken, whole[np.arange(2)[:, None], positions], atol=1e-5)


def test_masked_lm_refuses_a_backbone_without_the_head():
    with pytest.raises(ValueError, match="with_mlm"):
        build_masked_lm(build_transformer_model(TINY), max_predictions=4)


def test_read_text_names_the_line_that_is_not_utf8(tmp_path):
    (tmp_path / "a.txt").write_bytes("第一行\n\n".encode() + "第二行".encode("gbk") + b"\n")
    with pytest.raises(kbert.DataError, match=r"a\.txt, line 3: not UTF-8"):
        read_text(tmp_path)
    write(tmp_path, "blank.txt", "\n  \n")
    with pytest.raises(kbert.DataError, match="every line is blank"):
        read_text(tmp_path / "blank.txt")


@pytest.fixture(scope="module")
def pretrained(reviews, tmp_path_factory):
    directory, _ = reviews
    config = write(tmp_path_factory.mktemp("config"), "config.json", json.dumps(TINY))
    out = tmp_path_factory.mktemp("runs") / "pretrained"
    code = main(["pretrain", "--config", str(config), "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
                 "--train", str(directory / "train.txt"), "--valid", str(directory / "valid.txt"),
                 "--out", str(out), "--epochs", "4", "--batch-size", "16", "--lr", "3e-3", "--maxlen", "64"])
    assert code == 0
    return out


@pytest.mark.examples
def test_pretraining_learns_and_its_checkpoint_predicts_masked_characters(pretrained, reviews, tokenizer):
    state = json.loads((pretrained / "training.json").read_text(encoding="utf-8"))
    losses = [epoch["loss"] for epoch in state["history"]]
    assert losses[-1] < losses[0] - 1 and state["task"] == "mlm" and state["whole_word"] == "jieba"
    steps = (pretrained / "steps.tsv").read_text().splitlines()
    assert steps[0].split("\t") == ["epoch", "step", "loss", "accuracy", "tokens_per_second"] and len(steps) > 5
    assert {"bert_config.json", "vocab.txt", "bert_model.ckpt.index", "checkpoint"} <= {
        path.name for path in pretrained.iterdir()}

    # The checkpoint, read as Google's: each held-out review with every 7th character masked. Far better
    # than chance (a uniform guess) already; learning more than the characters' frequencies takes
    # ~1,000 steps, more than a unit test affords (docs/pretraining.md measures a real run).
    model = build_transformer_model(pretrained / "bert_config.json", pretrained / "bert_model.ckpt", with_mlm=True)
    _, texts = reviews
    mask_id, vocab_size = tokenizer.token_to_id("[MASK]"), 21128
    ids, segments = pad_batch([tokenizer.encode(text, maxlen=64) for text in texts["valid"]])
    where = np.zeros_like(ids, dtype=bool)
    where[:, 1::7] = True
    where &= (ids != 0) & (ids != tokenizer.sep_id)
    probabilities = model.predict([np.where(where, mask_id, ids), segments], verbose=0)[where]
    losses = -np.log(probabilities[np.arange(len(probabilities)), ids[where]])
    hits = probabilities.argmax(-1) == ids[where]
    assert np.mean(hits) > 100 / vocab_size and np.mean(losses) < np.log(vocab_size) - 2, (np.mean(hits), np.mean(losses))


@pytest.mark.examples
@pytest.mark.examples
def test_fine_tuning_and_further_pretraining_read_the_directory(pretrained, reviews, tmp_path, capsys):
    directory, _ = reviews
    vocab, config = pretrained / "vocab.txt", pretrained / "bert_config.json"
    assert main(["pretrain", "--config", str(config), "--vocab", str(vocab), "--checkpoint", str(pretrained),
                 "--train", str(directory / "valid.txt"), "--out", str(tmp_path / "further"), "--epochs", "1",
                 "--maxlen", "64", "--whole-word", "wordpiece", "--optimizer", "lamb"]) == 0
    trained = build_transformer_model(config, tmp_path / "further", with_mlm=True)
    start = build_transformer_model(config, pretrained, with_mlm=True)
    assert not np.allclose(keras.ops.convert_to_numpy(trained.get_layer("MLM-Dense").kernel), keras.ops.convert_to_numpy(start.get_layer("MLM-Dense").kernel))
    labelled = write(tmp_path, "labelled.tsv", "很好\t1\n很差\t0\n" * 8)
    # The directory's config and vocabulary are the defaults of --config and --vocab.
    assert main(["train", "--checkpoint", str(pretrained), "--train", str(labelled),
                 "--out", str(tmp_path / "classifier"), "--epochs", "1", "--maxlen", "16"]) == 0
    assert "saved" in capsys.readouterr().out
    # A checkpoint's prefix finds them beside it as well; weights alone need them given.
    assert main(["train", "--checkpoint", str(pretrained / "bert_model.ckpt"), "--train", str(labelled),
                 "--out", str(tmp_path / "by-prefix"), "--epochs", "1", "--maxlen", "16"]) == 0
    alone = tmp_path / "weights-alone"
    alone.mkdir()
    for part in pretrained.glob("bert_model.ckpt.*"):
        shutil.copyfile(part, alone / part.name)
    capsys.readouterr()
    assert main(["train", "--checkpoint", str(alone / "bert_model.ckpt"), "--train", str(labelled),
                 "--out", str(tmp_path / "no-config")]) == 2
    assert "--config is required, unless --checkpoint has one beside it" in capsys.readouterr().err
    assert not (tmp_path / "no-config.partial").exists()
    assert main(["evaluate", "--model", str(pretrained), "--data", str(labelled)]) == 2
    assert "a pre-trained model (kbert pretrain)" in capsys.readouterr().err


@pytest.mark.parametrize("arguments, message", [
    (["--model", "electra"], "does not have"),
    (["--mask-rate", "1.5"], "mask rate must be in"),
    (["--epochs", "0"], "expected a positive integer"),
])
def test_bad_pretraining_options_stop_before_anything_is_written(reviews, tmp_path, capsys, arguments, message):
    directory, _ = reviews
    argv = ["pretrain", "--config", str(CONFIGS / "bert_tiny.json"),
            "--vocab", str(shared_path("vocab", "chinese_vocab.txt")), "--train", str(directory / "valid.txt"),
            "--out", str(tmp_path / "out"), *arguments]
    try:
        code = main(argv)
    except SystemExit as exit:  # argparse's own checks
        code = exit.code
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_masks_are_redrawn_every_epoch_and_reproducible_from_the_seed(tokenizer, tmp_path):
    """Draws keyed on seed, epoch and example: no shuffling, yet each epoch masks anew; the same seed masks
    the same in another dataset, and an epoch's batches are the same drawn in any order (a resumed run)."""
    from kbert.tasks.pretraining import MaskEpoch, MaskedLanguageModelTask
    from kbert.training.options import TrainingOptions

    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(["我们在北京大学学习自然语言处理，感觉非常好。"] * 12) + "\n", encoding="utf-8")
    options = TrainingOptions.for_pretraining(maxlen=32, batch_size=4, shuffle=False)

    def epochs(seed, count=2):
        task = MaskedLanguageModelTask()
        data = task.read(tokenizer, str(text), str(text), None, dataclasses.replace(options, seed=seed))
        setter = MaskEpoch(data.train)
        drawn = []
        for epoch in range(count):
            setter.on_epoch_begin(epoch)
            drawn.append(np.concatenate([inputs[naming.INPUT_TOKEN] for inputs, _, _ in data.train]))
        valid = [np.concatenate([inputs[naming.INPUT_TOKEN] for inputs, _, _ in data.valid]) for _ in range(2)]
        setter.on_epoch_begin(1)
        backwards = np.concatenate([data.train[index][0][naming.INPUT_TOKEN]
                                    for index in reversed(range(len(data.train)))][::-1])
        return drawn, valid, backwards

    (first, second), valid, backwards = epochs(seed=3)
    assert not np.array_equal(first, second)  # a new draw each epoch, with the same order of examples
    np.testing.assert_array_equal(valid[0], valid[1])  # validation's masks stay
    (again_first, again_second), _, _ = epochs(seed=3)
    np.testing.assert_array_equal(first, again_first)
    np.testing.assert_array_equal(second, again_second)
    np.testing.assert_array_equal(backwards, second)
    (other_first, _), _, _ = epochs(seed=4)
    assert not np.array_equal(first, other_first)


def test_shuffled_batches_hold_every_sequence_once_in_a_new_order_each_epoch(tokenizer):
    from kbert.training.masking import MaskedBatches

    tokens, words = pack_sequences([(np.arange(100, 110) + 10 * line, np.arange(10)) for line in range(9)], 12, tokenizer.cls_id,
                                   tokenizer.sep_id)
    batches = MaskedBatches((tokens, words), 4, seed=1, shuffle=True, segments=True, rate=0.15, mask_id=103,
                            vocab_size=21128)
    orders = []
    for epoch in range(2):
        batches.epoch = epoch
        drawn = [batches[index] for index in range(len(batches))]
        positions = np.concatenate([inputs[naming.INPUT_MASKED_POSITIONS] for inputs, _, _ in drawn])
        labels = np.concatenate([labels for _, labels, _ in drawn])
        originals = np.concatenate([inputs[naming.INPUT_TOKEN] for inputs, _, _ in drawn])
        assert sorted(drawn[0][0]) == sorted([naming.INPUT_TOKEN, naming.INPUT_MASKED_POSITIONS,
                                              naming.INPUT_SEGMENT])
        assert len(originals) == len(tokens) and sum(len(inputs[naming.INPUT_TOKEN]) for inputs, _, _ in drawn) == 9
        # Which sequence came where: a masked sequence equals its original away from its masks.
        order = [next(row for row in range(len(tokens)) if np.array_equal(
            np.delete(tokens[row], place[weights > 0]), np.delete(masked, place[weights > 0])))
            for masked, place, weights in zip(originals, positions,
                                              np.concatenate([w for _, _, w in drawn]))]
        assert sorted(order) == list(range(len(tokens)))
        np.testing.assert_array_equal(labels[labels > 0], tokens[order][np.arange(len(order))[:, None],
                                                                         positions][labels > 0])
        orders.append(order)
    assert orders[0] != orders[1]
    with pytest.raises(IndexError):
        batches[len(batches)]


@pytest.mark.parametrize("text, refused", [
    # The case: characters the vocabulary lacks (CJK Extension B here) are all [UNK].
    ("𠀀𠀁𠀂𠀃𠀄𠀅𠀆𠀇" * 4, True),
    # Neighbours: a few unknown characters warn; text the vocabulary covers says nothing.
    ("我们在北京大学学习自然语言处理。" * 3 + "𠀀𠀁𠀂𠀃", False),
    ("我们在北京大学学习自然语言处理，感觉非常好。" * 3, None),
])
def test_text_the_vocabulary_does_not_cover(tokenizer, tmp_path, caplog, text, refused):
    from kbert.tasks.pretraining import MaskedLanguageModelTask
    from kbert.training.options import TrainingOptions

    corpus = tmp_path / "corpus.txt"
    corpus.write_text((text + "\n") * 4, encoding="utf-8")
    options = TrainingOptions.for_pretraining(maxlen=32, batch_size=4)
    read = lambda: MaskedLanguageModelTask().read(tokenizer, str(corpus), None, None, options)  # noqa: E731
    if refused:
        with pytest.raises(kbert.DataError, match=rf"{corpus}: \d+% of the text's tokens are \[UNK\].*predict \[UNK\]"):
            read()
        return
    read()
    warned = [record.getMessage() for record in caplog.records if "[UNK]" in record.getMessage()]
    assert bool(warned) == (refused is False), warned


# --- documents apart: several a row, or one a row ------------------------------------------------------

def test_documents_are_packed_whole_with_their_own_positions(tokenizer):
    lines = [(np.arange(100, 130), np.arange(30)), (np.array([7, 8]), np.array([0, 0])),
             (np.array([9]), np.array([0]))]
    packed = pack_documents(lines, maxlen=16, cls_id=1, sep_id=2)
    # The 30-token line is cut into documents of 14, 14 and 2 tokens; the rest fit behind the last piece.
    assert [[(end - start) for start, end, _ in row] for row in packed.spans] == [[16], [16], [4, 4, 3]]
    assert packed.positions[2].tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 0, 0, 0, 0, 0]
    assert packed.word_ids[2, :11].tolist() == [NOT_A_WORD, 0, 1, NOT_A_WORD, NOT_A_WORD, 0, 0, NOT_A_WORD,
                                                NOT_A_WORD, 0, NOT_A_WORD]
    one_a_row = pack_documents(lines, maxlen=16, cls_id=1, sep_id=2, several=False)
    assert len(one_a_row.token_ids) == 5 and all(len(row) == 1 for row in one_a_row.spans)
    # Twelve one-token documents in a 36-token row: one prediction each, more than maxlen's 15 % (6).
    tiny = pack_documents([(np.array([5]), np.array([0]))] * 12, maxlen=36, cls_id=1, sep_id=2)
    assert prediction_slots(tiny, 0.15) == 12 > max_predictions(36, 0.15)


@pytest.mark.parametrize("family", ["bert", "nezha"])
def test_documents_several_a_row_give_the_loss_they_give_one_a_row(tokenizer, reviews, family):
    """The same reviews, packed several a row (positions restarted, attention within each) and one a row
    (padded): every document is masked alike, and the model predicts each masked token alike, so the
    masked-token loss over all of them agrees."""
    _, texts = reviews
    words = list(tokenize_words(tokenizer, texts["valid"][:40], "jieba"))
    keras.utils.set_random_seed(5)
    bert = build_transformer_model({**TINY, "model_type": family}, with_mlm="linear")
    mask_args = {"rate": 0.15, "mask_id": tokenizer.token_to_id("[MASK]"), "vocab_size": 21128}
    totals = {}
    for several in (True, False):
        documents = pack_documents(words, 64, tokenizer.cls_id, tokenizer.sep_id, several=several)
        batches = MaskedBatches(documents, 8, positions=several, segments=True, **mask_args)
        model = build_masked_lm(bert, batches.slots, packed=several)
        losses, labels = [], []
        for index in range(len(batches)):
            inputs, targets, weights = batches[index]
            logits = model.predict_on_batch([inputs[tensor.name] for tensor in model.inputs])
            logits = keras.ops.convert_to_numpy(logits).astype(np.float64)
            chosen = np.take_along_axis(logits, targets[..., None], -1)[..., 0]
            each = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1) - chosen
            losses += list(each[weights > 0])
            labels += list(targets[weights > 0])
        totals[several] = (np.sort(losses), sorted(labels), len(batches))
    packed, padded = totals[True], totals[False]
    assert packed[2] < padded[2]  # fewer rows
    assert packed[1] == padded[1] and len(packed[1]) > 40  # the same tokens masked
    np.testing.assert_allclose(packed[0], padded[0], rtol=1e-5)
    np.testing.assert_allclose(packed[0].mean(), padded[0].mean(), rtol=1e-6)


def test_pretraining_with_documents_apart_writes_a_plain_backbone(reviews, tmp_path):
    directory, texts = reviews
    config = write(tmp_path, "config.json", json.dumps(TINY))
    out = tmp_path / "packed"
    code = main(["pretrain", "--config", str(config), "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
                 "--train", str(directory / "valid.txt"), "--valid", str(directory / "valid.txt"), "--pack",
                 "documents", "--out", str(out), "--epochs", "1", "--batch-size", "8", "--maxlen", "64"])
    assert code == 0
    state = json.loads((out / "training.json").read_text(encoding="utf-8"))
    assert state["pack"] == "documents" and state["options"]["pack"] == "documents"
    model = build_transformer_model(out / "bert_config.json", out, with_mlm=True)  # its checkpoint, either format
    assert [tensor.name for tensor in model.inputs] == ["Input-Token", "Input-Segment"]
