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
    token_ids, segment_ids = encoded
    target = [i for i, s in zip(token_ids, segment_ids) if s == 1]  # target tokens and the last [SEP]
    assert target[-1] == tokenizer.sep_id
    assert [label for label in labels if label != IGNORED] == target
    first_target = segment_ids.index(1)
    assert labels[first_target - 1] == token_ids[first_target]  # the source's [SEP] predicts the target's start
    assert labels[-1] == IGNORED


def test_char_f1():
    assert char_f1("", "") == 1.0 and char_f1("abc", "") == 0.0 and char_f1("abc", "abc") == 1.0


kbert = kbert_in_process


def test_train_evaluate_predict_from_the_command_line(tmp_path):
    """MSRA as generative extraction: the target lists the sentence's entities as TYPE:text."""
    for split, count in (("train", 400), ("dev", 60)):
        sentences = read_tagged(shared_path("data", "msra_ner", f"msra.{split}.bmes"))[0][:count]
        lines = [sentence.text + "\t" + "；".join(f"{kind}:{sentence.text[a:b]}" for kind, a, b in
                                                   spans(sentence.tags)) for sentence in sentences]
        write(tmp_path, f"{split}.tsv", "\n".join(lines) + "\n")
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

    sources = [line.split("\t")[0] for line in (tmp_path / "dev.tsv").read_text().splitlines()[:3]]
    result = kbert("predict", "--model", out, "--beam-size", "2", "--json", stdin="\n".join(sources))
    assert result.returncode == 0, result.stderr[-3000:]
    assert [json.loads(line)["text"] for line in result.stdout.splitlines()] == sources


def test_the_msra_extraction_example_writes_and_reads_targets(tmp_path):
    """docs/examples/msra_generative_ie.py: targets name every entity, and parse back to them."""
    import importlib.util

    from conftest import REPO

    spec = importlib.util.spec_from_file_location("msra_ie", REPO / "docs" / "examples" / "msra_generative_ie.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
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
