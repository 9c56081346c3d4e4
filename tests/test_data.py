import json

import numpy as np
import pytest

from conftest import shared_path, write
from kbert import DataError
from kbert.training.data import LabelMap, encode_examples, make_dataset, read_examples
from kbert.tokenizers.wordpiece import Tokenizer


def test_real_sentiment_file():
    examples, report = read_examples(shared_path("data", "sentiment", "sentiment.valid.data"))
    assert len(examples) == 2111 and str(report).endswith(": 2111 examples")
    assert {e.label for e in examples} == {"0", "1"}
    assert LabelMap.from_examples(examples).names == ["0", "1"]


def test_malformed_row_names_file_and_line(tmp_path):
    path = write(tmp_path, "train.data", "很好\t1\n\n不好\n还行\t1\t0\n")
    with pytest.raises(DataError) as error:
        read_examples(path)
    assert str(error.value) == f"{path}, line 3: expected 'text<TAB>label', found 0 tab(s)"
    examples, report = read_examples(path, skip_malformed=True)
    assert [e.text for e in examples] == ["很好"]
    assert report.skipped == [(3, "expected 'text<TAB>label', found 0 tab(s)"),
                              (4, "expected 'text<TAB>label', found 2 tab(s)")]
    assert str(report) == f"{path}: 1 examples, 2 malformed rows skipped (lines 3, 4)"


def test_csv_tsv_and_json_lines(tmp_path):
    csv_path = write(tmp_path, "d.csv", 'label,text,text_b\npos,"good, really",yes\nneg,bad,\n')
    examples, _ = read_examples(csv_path)
    assert [(e.text, e.text_b, e.label) for e in examples] == [("good, really", "yes", "pos"),
                                                              ("bad", None, "neg")]
    tsv_path = write(tmp_path, "d.tsv", "text\tlabel\nfine\tpos\n")
    assert read_examples(tsv_path)[0][0].label == "pos"
    jsonl = write(tmp_path, "d.jsonl", json.dumps({"text": "a", "label": 2}) + "\n"
                  + json.dumps({"text": "b", "text_b": "c", "label": 10}) + "\n")
    examples, _ = read_examples(jsonl)
    assert LabelMap.from_examples(examples).names == ["2", "10"]  # numeric order


@pytest.mark.parametrize("name, text, message", [
    ("d.csv", "sentence,label\nx,1\n", "line 1: the header lacks column(s) text (found: sentence, label)"),
    ("d.csv", "text,label\nx,1,extra\n", "line 2: expected 2 columns, found 3"),
    ("d.jsonl", '{"text": "x", "label": 1}\n{"text": "y", "label": \n', "line 2: not valid JSON"),
    ("d.jsonl", '{"text": "", "label": 1}\n', "line 1: empty or missing text"),
    ("d.jsonl", '{"text": "x"}\n', "line 1: missing label"),
    ("d.data", "", "no examples"),
])
def test_bad_rows(tmp_path, name, text, message):
    path = write(tmp_path, name, text)
    with pytest.raises(DataError) as error:
        read_examples(path)
    assert str(error.value).startswith(f"{path}{',' if 'line' in message else ':'} {message}")


def test_unknown_label_in_validation(tmp_path):
    train, _ = read_examples(write(tmp_path, "t.data", "a\tpos\nb\tneg\n"))
    valid_path = write(tmp_path, "v.data", "c\tpos\nd\tneutral\n")
    valid, _ = read_examples(valid_path)
    labels = LabelMap.from_examples(train)
    with pytest.raises(DataError, match=r"v.data, line 2: label 'neutral' is not among the training "
                                        r"labels \(neg, pos\)"):
        labels.ids(valid, str(valid_path))
    labels.save(str(tmp_path))
    assert LabelMap.load(str(tmp_path)).names == ["neg", "pos"]


def test_batches_are_padded_to_their_own_longest_row():
    tokenizer = Tokenizer(shared_path("vocab", "chinese_vocab.txt"))
    examples, _ = read_examples(shared_path("data", "sentiment", "sentiment.valid.data"))
    examples = examples[:6]
    encoded = encode_examples(tokenizer, examples, maxlen=64)
    batches = list(make_dataset(encoded, np.arange(6, dtype=np.int32), batch_size=3))
    longest = max(len(ids) for ids, _ in encoded)
    for start, ((tokens, segments), labels) in zip((0, 3), batches):
        lengths = [len(ids) for ids, _ in encoded[start:start + 3]]
        # Rounded up to a multiple of 16, never past the longest sequence of the data.
        assert tokens.shape == (3, min(-(-max(lengths) // 16) * 16, longest))
        assert segments.shape == tokens.shape
        assert labels.numpy().tolist() == [start, start + 1, start + 2]
        for row, length in enumerate(lengths):
            assert tokens[row, :length].numpy().tolist() == encoded[start + row][0]
            assert not tokens[row, length:].numpy().any()


def test_prediction_input_ignores_a_label_column(tmp_path):
    path = write(tmp_path, "texts.data", "很好\t1\n一般般\n")
    examples, _ = read_examples(path, labelled=False)
    assert [(e.text, e.label) for e in examples] == [("很好", None), ("一般般", None)]


def test_tsv_text_may_start_with_a_quote(tmp_path):
    # With CSV quoting, the first '"' would swallow the rows up to the next '"'.
    path = write(tmp_path, "d.tsv", 'text\tlabel\n"好"的开始\t1\n中间\t0\n还有"引号\t1\n结束"\t0\n最后\t1\n')
    examples, _ = read_examples(path)
    assert [(e.text, e.label) for e in examples] == [('"好"的开始', "1"), ("中间", "0"), ('还有"引号', "1"),
                                                    ('结束"', "0"), ("最后", "1")]


def test_header_in_a_text_label_file_is_an_error(tmp_path):
    path = write(tmp_path, "train.data", "text\tlabel\n很好\t1\n")
    with pytest.raises(DataError) as error:
        read_examples(path)
    assert str(error.value) == (f"{path}, line 1: 'text\\tlabel' looks like a header, but a text<TAB>label "
                                "file has none: remove the line, or name the file *.tsv to read it as a "
                                "table with a header")


def test_byte_order_mark_is_ignored(tmp_path):
    path = tmp_path / "d.csv"
    path.write_bytes("text,label\n好,1\n".encode("utf-8-sig"))
    assert [(e.text, e.label) for e in read_examples(path)[0]] == [("好", "1")]
    path = tmp_path / "d.data"
    path.write_bytes("好\t1\n".encode("utf-8-sig"))
    assert [(e.text, e.label) for e in read_examples(path)[0]] == [("好", "1")]
