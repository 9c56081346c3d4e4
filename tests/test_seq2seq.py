"""The seq2seq task: pairs, target-only labels, UniLM training, generation from the command line."""

import json
import re

import numpy as np
import pytest

from conftest import CONFIGS, kbert_in_process, shared_path, write
from kbert import DataError, Tokenizer
from kbert.tasks.labelling import read_tagged, spans
from kbert.tasks.seq2seq import IGNORED, Pair, char_f1, encode_pairs, read_pairs


@pytest.mark.parametrize("text, line, message", [
    ("好\t1\n只有一列\n", 2, "expected source<TAB>target (1 tab(s)) as on line 1, found 0"),
    ("好\t1\na\tb\tc\n", 2, "expected source<TAB>target (1 tab(s)) as on line 1, found 2"),
    ("\tb\n", 1, "empty source"),
])
def test_bad_lines_name_file_and_line(tmp_path, text, line, message):
    path = write(tmp_path, "pairs.tsv", text + "好\t坏\n")
    with pytest.raises(DataError, match=re.escape(f"{path}, line {line}: {message}")):
        read_pairs(path)
    pairs, report = read_pairs(path, skip_malformed=True)
    assert report.skipped == [(line, message)] and pairs[-1].target == "坏"


def test_json_lines(tmp_path):
    path = write(tmp_path, "pairs.jsonl", '{"source": "北京", "target": "LOC:北京"}\n{"source": "x"}\n')
    with pytest.raises(DataError, match=f"{path}, line 2: no key for target \\(keys: source\\); name it with "
                                        "--columns target=KEY"):
        read_pairs(path)
    assert read_pairs(path, skip_malformed=True)[0] == [Pair("北京", "LOC:北京", 1)]


def test_labels_are_the_next_target_token_only():
    tokenizer = Tokenizer(shared_path("vocab", "chinese_vocab.txt"))
    (encoded,), (labels,), cut = encode_pairs(tokenizer, [Pair("张三去北京", "PER:张三", 1)], maxlen=64)
    assert cut == []
    token_ids, segment_ids, positions = encoded
    target = [i for i, s in zip(token_ids, segment_ids) if s == 1]  # target tokens and the last [SEP]
    assert target[-1] == tokenizer.sep_id
    first_target = segment_ids.index(1)
    # The source's [SEP] predicts the target's start; the last [SEP] predicts nothing.
    assert positions == list(range(first_target - 1, len(token_ids) - 1))
    assert labels == target == [token_ids[position + 1] for position in positions]


def test_unilm_trains_its_head_on_the_target_positions_only():
    """The training graph's outputs are the whole UniLM's at the target positions; padding slots too."""
    from kbert import build_transformer_model
    from kbert.tasks.seq2seq import Seq2SeqTask
    from kbert.training.pipeline import make_dataset

    tokenizer = Tokenizer(shared_path("vocab", "chinese_vocab.txt"))
    task = Seq2SeqTask()
    bert = build_transformer_model(CONFIGS / "roformer_small_chinese.json", **task.backbone_args())
    trained = task.training_model(task.build(bert, 0, None))
    assert trained.count_params() == bert.count_params()
    pairs = [Pair("张三去北京", "PER:张三；LOC:北京", 1), Pair("今天天气很好", "", 2)]
    encoded, labels, _ = encode_pairs(tokenizer, pairs, maxlen=64)
    (tokens, segments, positions), padded_labels = next(iter(make_dataset(encoded, labels, 2, labels_follow=2)))
    assert positions.shape == padded_labels.shape
    # predict_on_batch, not a call: numpy arrays on every backend (a PyTorch call's output keeps its gradient)
    on_targets = trained.predict_on_batch([tokens, segments, positions])
    everywhere = bert.predict_on_batch([tokens, segments])
    for row, (_, _, row_positions) in enumerate(encoded):
        np.testing.assert_allclose(np.asarray(on_targets[row, :len(row_positions)]),
                                   np.asarray(everywhere[row])[row_positions], atol=1e-6)
        assert list(np.asarray(padded_labels[row, len(row_positions):])) == \
            [IGNORED] * (positions.shape[1] - len(row_positions))


def test_t5_pairs_feed_the_decoder_the_target_shifted_right():
    tokenizer = Tokenizer(shared_path("vocab", "chinese_vocab.txt"))
    pairs = [Pair("张三去北京", "PER:张三", 1), Pair("今天很好", "", 2)]
    encoded, labels, cut = encode_pairs(tokenizer, pairs, maxlen=64, encoder_decoder=True)
    assert cut == []
    (source, decoder), (empty_source, empty_decoder) = encoded
    target = tokenizer.encode("PER:张三")[0]  # [CLS] target [SEP]
    assert source == tokenizer.encode("张三去北京")[0]
    assert decoder == target[:-1] and labels[0] == target[1:]  # [CLS] starts the decoder; [SEP] ends the labels
    assert empty_decoder == [tokenizer.cls_id] and labels[1] == [tokenizer.sep_id]
    # Source and decoder are cut to maxlen each, and counted.
    _, _, cut = encode_pairs(tokenizer, [Pair("北" * 80, "京", 7)], maxlen=16, encoder_decoder=True)
    assert cut == [7]


def test_char_f1():
    assert char_f1("", "") == 1.0 and char_f1("abc", "") == 0.0 and char_f1("abc", "abc") == 1.0


kbert = kbert_in_process


def write_msra_pairs(directory, train: int, dev: int) -> None:
    """train.tsv and dev.tsv: the first MSRA sentences of each split, each with its entities as TYPE:text."""
    for split, count in (("train", train), ("dev", dev)):
        sentences = read_tagged(shared_path("data", "msra_ner", f"msra.{split}.bmes"))[0][:count]
        lines = [sentence.text + "\t" + "；".join(f"{kind}:{sentence.text[a:b]}" for kind, a, b in
                                                   spans(sentence.tags)) for sentence in sentences]
        write(directory, f"{split}.tsv", "\n".join(lines) + "\n")


def assert_token_accuracy_is_the_validation_accuracy(out, train_path, dev_path, state):
    """The example's `tokens` counts every validation target token once, as training's metric did."""
    counts = msra_example().token_accuracy(str(out), str(train_path), str(dev_path))
    right, total = (sum(value[i] for value in counts.values()) for i in (0, 1))
    assert {kind for kind, _ in counts} == {"copied", "format"}
    assert right / total == pytest.approx(state["best_val_target_accuracy"], abs=1e-6)


def msra_example():
    """docs/examples/msra_generative_ie.py, imported."""
    import importlib.util

    from conftest import REPO

    spec = importlib.util.spec_from_file_location("msra_ie", REPO / "docs" / "examples" / "msra_generative_ie.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


@pytest.mark.examples
def test_train_evaluate_predict_from_the_command_line(tmp_path, capsys):
    """MSRA as generative extraction: the target lists the sentence's entities as TYPE:text."""
    write_msra_pairs(tmp_path, train=400, dev=60)
    out = tmp_path / "generator"
    result = kbert("train", "--task", "seq2seq", "--config", CONFIGS / "bert_tiny.json", "--vocab",
                   shared_path("vocab", "chinese_vocab.txt"), "--train", tmp_path / "train.tsv", "--valid",
                   tmp_path / "dev.tsv", "--epochs", "2", "--batch-size", "16", "--maxlen", "64", "--lr", "2e-3",
                   "--out", out)
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((out / "training.json").read_text())
    assert state["task"] == "seq2seq"
    assert f"validation target-token accuracy {state['best_val_target_accuracy']:.4f})" in result.stdout

    result = kbert("evaluate", "--model", out, "--data", tmp_path / "dev.tsv", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    scores = json.loads(result.stdout)
    references = [pair.target for pair in read_pairs(tmp_path / "dev.tsv")[0]]
    generated = ["".join(text.split()) for text in scores["generated"]]
    assert scores["exact_match"] == pytest.approx(np.mean([g == r for g, r in zip(generated, references)]))
    assert scores["char_f1"] == pytest.approx(np.mean([char_f1(g, r) for g, r in zip(generated, references)]))
    # The example's scorer decodes once: `kbert evaluate`'s figures, and every reference entity as support.
    example = msra_example()
    example.score(str(out), str(tmp_path / "dev.tsv"), 1)
    printed = capsys.readouterr().out
    assert f"exact match {scores['exact_match']:.4f}, character F1 {scores['char_f1']:.4f}" in printed
    overall = next(line for line in printed.splitlines() if line.startswith("overall")).split()
    assert int(overall[-1]) == sum(len(example.entities_of(reference)) for reference in references)
    assert_token_accuracy_is_the_validation_accuracy(out, tmp_path / "train.tsv", tmp_path / "dev.tsv", state)

    sources = [line.split("\t")[0] for line in (tmp_path / "dev.tsv").read_text().splitlines()[:3]]
    result = kbert("predict", "--model", out, "--beam-size", "2", "--json", stdin="\n".join(sources))
    assert result.returncode == 0, result.stderr[-3000:]
    assert [json.loads(line)["text"] for line in result.stdout.splitlines()] == sources
    # --max-new-tokens near maxlen caps the targets; it does not cut the sources to make room for them.
    result = kbert("predict", "--model", out, "--json", stdin="\n".join(sources))
    capped = kbert("predict", "--model", out, "--json", "--max-new-tokens", "60", stdin="\n".join(sources))
    assert capped.returncode == 0 and "were cut" not in capped.stderr.replace(result.stderr, "")
    assert capped.stdout == result.stdout


@pytest.mark.examples
def test_t5_trains_evaluates_and_predicts_from_the_command_line(tmp_path):
    """--model t5.1.1: the encoder-decoder learns the pairs; generation decodes with the cache from [CLS]."""
    write_msra_pairs(tmp_path, train=200, dev=30)
    config = write(tmp_path, "t5.json", json.dumps({
        "vocab_size": 21128, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "attention_head_size": 8, "intermediate_size": 64, "hidden_act": ["gelu", "linear"]}))
    out = tmp_path / "t5"
    result = kbert("train", "--task", "seq2seq", "--model", "t5.1.1", "--config", config, "--vocab",
                   shared_path("vocab", "chinese_vocab.txt"), "--train", tmp_path / "train.tsv", "--valid",
                   tmp_path / "dev.tsv", "--epochs", "1", "--batch-size", "16", "--maxlen", "48", "--lr", "1e-2",
                   "--optimizer", "adafactor", "--weight-decay", "0", "--out", out)
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((out / "training.json").read_text())
    assert state["options"]["model"] == "t5.1.1" and state["best_val_target_accuracy"] > 0
    assert state["options"]["optimizer"] == "adafactor"
    assert_token_accuracy_is_the_validation_accuracy(out, tmp_path / "train.tsv", tmp_path / "dev.tsv", state)

    result = kbert("evaluate", "--model", out, "--data", tmp_path / "dev.tsv", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    scores = json.loads(result.stdout)
    assert len(scores["generated"]) == 30 and 0 <= scores["char_f1"] <= 1

    from kbert import generate
    from kbert.tasks.seq2seq import load_generator

    loaded = load_generator(str(out))
    sources = [line.split("\t")[0] for line in (tmp_path / "dev.tsv").read_text().splitlines()[:3]]
    prompts = [ids for ids, _ in loaded.tokenizer.encode_all(sources, maxlen=48)]
    tokenizer = loaded.tokenizer
    expected = [tokenizer.decode(ids) for ids in generate(loaded.model, prompts, max_new_tokens=47,
                                                          end_id=tokenizer.sep_id, start_id=tokenizer.cls_id,
                                                          use_cache=False)]
    result = kbert("predict", "--model", out, "--json", stdin="\n".join(sources))
    assert result.returncode == 0, result.stderr[-3000:]
    assert [json.loads(line)["target"] for line in result.stdout.splitlines()] == expected
    assert scores["generated"][:3] == expected
    result = kbert("train", "--task", "seq2seq", "--model", "t5.1.1_encoder", "--config", config, "--vocab",
                   shared_path("vocab", "chinese_vocab.txt"), "--train", tmp_path / "train.tsv",
                   "--out", tmp_path / "encoder")
    assert result.returncode == 2 and "--task seq2seq trains a whole T5" in result.stderr


def test_the_msra_extraction_example_writes_and_reads_targets(tmp_path):
    """docs/examples/msra_generative_ie.py: targets name every entity, and parse back to them."""
    example = msra_example()
    example.write_pairs(str(shared_path("data", "msra_ner")), str(tmp_path / "pairs"))
    pairs, _ = read_pairs(tmp_path / "pairs" / "dev.tsv")
    sentences = read_tagged(shared_path("data", "msra_ner", "msra.dev.bmes"))[0]
    assert len(pairs) == len(sentences) == 3000
    for pair, sentence in zip(pairs, sentences):
        assert pair.source == sentence.text
        assert example.entities_of(pair.target) == [(kind, sentence.text[a:b]) for kind, a, b in spans(sentence.tags)]
    assert example.entities_of("per: 张 三 ；loc:北京；bad") == [("PER", "张三"), ("LOC", "北京")]
    with pytest.raises(FileExistsError):  # an earlier run's data is never overwritten
        example.write_pairs(str(shared_path("data", "msra_ner")), str(tmp_path / "pairs"))


def test_t5_trained_from_start_id_0_sees_and_trains_its_first_target_token():
    """SentencePiece framing: the decoder starts at id 0 (the padding id). The model kbert trains reads it:
    position 0 attends to itself only, and its prediction (the first target token) is in the loss."""
    import keras

    from kbert import build_transformer_model
    from kbert.models.registry import resolve
    from kbert.tasks.seq2seq import Seq2SeqTask

    task = Seq2SeqTask("mt5.1.1")
    family, config = resolve({"vocab_size": 32, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                              "intermediate_size": 32, "hidden_act": ["gelu", "linear"], "dropout_rate": 0.0},
                             "mt5.1.1")
    config = task.model_config(family.config_to_train(config, initialised=True))
    assert (config.decoder_mask_zero, config.scale_decoder_outputs, config.cross_position_bias) == (False,) * 3
    assert family.hf_differences(config) == []  # it computes as transformers does: exported without a warning
    t5 = build_transformer_model(config, model="mt5.1.1")
    source = np.array([[5, 6, 7, 1]])
    first = t5.predict([source, np.array([[0, 9, 4]])], verbose=0)[:, 0]
    other = t5.predict([source, np.array([[0, 12, 20]])], verbose=0)[:, 0]
    np.testing.assert_allclose(first, other, atol=1e-6)  # the future is out of position 0's view
    t5.compile(loss=keras.losses.SparseCategoricalCrossentropy(ignore_class=IGNORED))
    loss = t5.evaluate([source, np.array([[0, 0, 0]])], np.array([[9, 0, 0]]), verbose=0)
    assert loss == pytest.approx(-np.log(first[0, 9]), rel=1e-5)  # the first target token's loss, alone


def test_a_t5_that_kbert_initialises_is_drawn_as_google_draws_it():
    """Each projection with std 1/√fan-in (the query 1/√(H·K)), the token embedding with std 1, so the
    residual stream and the first logits have unit scale; bert4keras's std 0.02 left both small."""
    import keras

    from kbert import build_transformer_model
    from kbert.models.registry import graph_class, resolve
    from kbert.tasks.seq2seq import Seq2SeqTask

    keras.utils.set_random_seed(3)
    family, config = resolve("configs/t5_small_chinese.json", "t5.1.1")
    config = Seq2SeqTask("t5.1.1").model_config(family.config_to_train(config, initialised=True))
    t5 = build_transformer_model(config, model="t5.1.1")
    before = {weight.path: np.std(keras.ops.convert_to_numpy(weight)) for weight in t5.weights}
    graph_class(family).initialise(t5, config)
    after = {weight.path: np.std(keras.ops.convert_to_numpy(weight)) for weight in t5.weights}
    h, k, i = config.hidden_size, config.head_size, config.intermediate_size
    expected = {"Embedding-Token/embeddings": 1.0,
                "Encoder-Embedding-Relative-Position/embeddings": h ** -0.5,
                "Decoder-Transformer-0-MultiHeadCrossAttention/query/kernel": (h * k) ** -0.5,
                "Encoder-Transformer-1-MultiHeadSelfAttention/key/kernel": h ** -0.5,
                "Encoder-Transformer-1-MultiHeadSelfAttention/output/kernel": (config.num_attention_heads * k) ** -0.5,
                "Decoder-Transformer-3-FeedForward/gate/kernel": h ** -0.5,
                "Decoder-Transformer-3-FeedForward/output/kernel": i ** -0.5,
                "Decoder-Output-LM/kernel": h ** -0.5}
    for path, std in expected.items():
        assert after[path] == pytest.approx(std, rel=0.1), path
        assert before[path] == pytest.approx(0.02 * 0.88, rel=0.15), path  # bert4keras's truncated normal
    assert after["Decoder-Output-Norm/scale"] == before["Decoder-Output-Norm/scale"] == 0.0  # norms stay at 1
    probabilities = t5.predict([np.array([[101, 2769, 4263, 102]]), np.array([[101, 872]])], verbose=0)
    logits = np.log(probabilities[0, -1])
    assert 0.5 < np.std(logits) < 2.0  # unit-scale first logits: neither flat nor saturated
