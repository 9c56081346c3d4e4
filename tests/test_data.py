import csv
import json

import pytest

from conftest import shared_path, write
from kbert import DataError
from kbert.training.data import Example, LabelMap, read_examples


def test_real_sentiment_file():
    examples, report = read_examples(shared_path("data", "sentiment", "sentiment.valid.data"))
    assert len(examples) == 2111
    assert str(report).endswith(": 2111 examples (tab-separated, no header: text, label)")
    assert {e.label for e in examples} == {"0", "1"}
    assert LabelMap.from_examples(examples).names == ["0", "1"]


def test_malformed_row_names_file_and_line(tmp_path):
    path = write(tmp_path, "train.data", "很好\t1\n\n不好\n还行\t1\t0\n")
    with pytest.raises(DataError) as error:
        read_examples(path)
    expected = "expected text<TAB>label (1 tab(s)) as on line 1, found {}"
    assert str(error.value) == f"{path}, line 3: {expected.format(0)}"
    examples, report = read_examples(path, skip_malformed=True)
    assert [e.text for e in examples] == ["很好"]
    assert report.skipped == [(3, expected.format(0)), (4, expected.format(2))]
    assert str(report) == (f"{path}: 1 examples (tab-separated, no header: text, label), "
                           "2 malformed rows skipped (lines 3, 4)")


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
    ("d.csv", "id,sentence2,label\n1,x,1\n", "line 1: the header has no column for text (found: id, sentence2, "
     "label); name it with --columns text=COLUMN, or rename the column to one of text, sentence"),
    ("d.csv", "text,label\nx,1,extra\n", "line 2: expected 2 columns as in the header, found 3"),
    ("d.jsonl", '{"text": "x", "label": 1}\n{"text": "y", "label": \n', "line 2: not valid JSON"),
    ("d.jsonl", '{"text": "", "label": 1}\n', "line 1: empty or missing text"),
    ("d.jsonl", '{"text": "x"}\n', "line 1: no key for label (keys: text); name it with --columns label=KEY"),
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


def test_prediction_input_is_one_whole_line_a_text(tmp_path):
    path = write(tmp_path, "texts.data", "很好\t1\n一般般\n")
    examples, report = read_examples(path, labelled=False)
    assert [(e.text, e.label) for e in examples] == [("很好\t1", None), ("一般般", None)]
    assert report.layout == "one text a line"
    # A header names the column to read.
    examples, _ = read_examples(write(tmp_path, "texts.tsv", "text\tlabel\n很好\t1\n"), labelled=False)
    assert [(e.text, e.label) for e in examples] == [("很好", None)]


def test_tsv_text_may_start_with_a_quote(tmp_path):
    # With CSV quoting, the first '"' would swallow the rows up to the next '"'.
    path = write(tmp_path, "d.tsv", 'text\tlabel\n"好"的开始\t1\n中间\t0\n还有"引号\t1\n结束"\t0\n最后\t1\n')
    examples, _ = read_examples(path)
    assert [(e.text, e.label) for e in examples] == [('"好"的开始', "1"), ("中间", "0"), ('还有"引号', "1"),
                                                    ('结束"', "0"), ("最后", "1")]


def test_a_header_is_read_whatever_the_extension(tmp_path):
    path = write(tmp_path, "train.data", "text\tlabel\n很好\t1\n")
    examples, report = read_examples(path)
    assert [(e.text, e.label, e.line) for e in examples] == [("很好", "1", 2)]
    assert report.layout == "tab-separated with a header: text=text, label=label"


def test_byte_order_mark_is_ignored(tmp_path):
    path = tmp_path / "d.csv"
    path.write_bytes("text,label\n好,1\n".encode("utf-8-sig"))
    assert [(e.text, e.label) for e in read_examples(path)[0]] == [("好", "1")]
    path = tmp_path / "d.data"
    path.write_bytes("好\t1\n".encode("utf-8-sig"))
    assert [(e.text, e.label) for e in read_examples(path)[0]] == [("好", "1")]


def _sentiment_rows():
    with open(shared_path("data", "sentiment", "sentiment.train.data"), encoding="utf-8") as handle:
        return [line.rstrip("\n").split("\t") for line in handle if line.strip()]


def test_the_same_examples_from_every_format_people_have(tmp_path):
    rows = _sentiment_rows()
    (tmp_path / "train.tsv").write_text("".join(f"{text}\t{label}\n" for text, label in rows), encoding="utf-8")
    with open(tmp_path / "train.csv", "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    (tmp_path / "glue.tsv").write_text("sentence\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in rows),
                                       encoding="utf-8")
    (tmp_path / "clue.json").write_text("".join(json.dumps({"label": lab, "label_des": "情感", "sentence": t},
                                                           ensure_ascii=False) + "\n" for t, lab in rows),
                                        encoding="utf-8")
    expected = [(text, label) for text, label in rows]
    layouts = {}
    for name in ("train.tsv", "train.csv", "glue.tsv", "clue.json"):
        examples, report = read_examples(tmp_path / name)
        assert [(e.text, e.label) for e in examples] == expected, name
        layouts[name] = report.layout
    assert len(expected) == 16883
    assert layouts == {"train.tsv": "tab-separated, no header: text, label",
                       "train.csv": "comma-separated with a header: text=text, label=label",
                       "glue.tsv": "tab-separated with a header: text=sentence, label=label",
                       "clue.json": "JSON Lines"}


@pytest.mark.parametrize("name, text, columns, expected", [
    # An unknown label column beside a known text column: the one column left.
    ("r.tsv", "review\tsentiment\n好\t1\n坏\t0\n", None, [("好", None, "1"), ("坏", None, "0")]),
    ("r.tsv", "id\treview\tstars\n7\t好\t5\n", {"label": "stars"}, [("好", None, "5")]),
    ("p.tsv", "sentence1\tsentence2\tlabel\n甲\t乙\t1\n", None, [("甲", "乙", "1")]),
    ("p.data", "甲\t乙\t1\n丙\t丁\t0\n", None, [("甲", "乙", "1"), ("丙", "丁", "0")]),
    ("q.tsv", '"text"\t"label"\n"多行\n文本"\t1\n', None, [("多行\n文本", None, "1")]),
    ("k.jsonl", '{"content": "好", "y": 1}\n', {"label": "y"}, [("好", None, "1")]),
    ("n.csv", "好,1\n坏,0\n", None, [("好", None, "1"), ("坏", None, "0")]),
])
def test_columns_by_name_by_elimination_and_by_option(tmp_path, name, text, columns, expected):
    examples, _ = read_examples(write(tmp_path, name, text), columns=columns)
    assert [(e.text, e.text_b, e.label) for e in examples] == expected


@pytest.mark.parametrize("text, columns, message", [
    ("review\tsentiment\n好\t1\n坏\t0\n坏\t0\n", {"label": "stars"},
     "line 1: --columns names 'stars' for label, but the header has review, sentiment"),
    ("good\tsentiment\n好\t1\n坏\t0\n", None,
     "line 1: the row of 'good' labelled 'sentiment' looks like a header (every other label is a number): if it "
     "is, name its text and label columns with --columns text=COLUMN,label=COLUMN; if not, remove the line"),
    ("好\t1\n", {"text": "x"}, "line 1: the file has no header row"),
    ("好\n坏\n", None, "line 1: 1 tab-separated columns and no header; expected text<TAB>label or "
                     "text<TAB>text_b<TAB>label rows, or a header row naming the columns (text, text_b, label)"),
    ("[1, 2]\n", None, "a JSON array; kbert reads JSON Lines"),
    ("id\ttext\tscore\tstars\n1\t好\t2\t3\n", None, "line 1: the header has no column for label (found: id, "
     "text, score, stars); name it with --columns label=COLUMN"),
])
def test_a_refusal_names_what_was_found_and_the_fix(tmp_path, text, columns, message):
    path = write(tmp_path, "d.tsv", text)
    with pytest.raises(DataError) as error:
        read_examples(path, columns=columns)
    assert str(error.value).startswith(f"{path}{',' if message.startswith('line') else ':'} {message}")


def test_labels_in_other_digits_are_names_not_numbers(tmp_path):
    examples, _ = read_examples(write(tmp_path, "d.data", "坏\t1\n好\t²\n中\t10\n"))
    assert LabelMap.from_examples(examples).names == ["1", "10", "²"]


def test_a_first_row_labelled_like_a_column_name_is_data(tmp_path):
    examples, report = read_examples(write(tmp_path, "d.data", "好\tclass\n坏\tlabel\n"))
    assert [(e.text, e.label) for e in examples] == [("好", "class"), ("坏", "label")]
    assert report.layout == "tab-separated, no header: text, label"


@pytest.mark.parametrize("labels, message", [
    # The case: 1 and 1.0 (and pos/neg beside them) would become separate classes.
    (["1", "1.0", "pos", "neg", "1"], r"'1' \(2 rows\) and '1.0' \(1 row\) look like one label"),
    # Neighbours: case, and a number with a leading zero.
    (["Pos", "pos", "neg"], r"'Pos' \(1 row\) and 'pos' \(1 row\)"),
    (["01", "1", "0"], r"'01' \(1 row\) and '1' \(1 row\)"),
])
def test_spellings_of_one_label_are_refused(tmp_path, labels, message):
    path = write(tmp_path, "train.tsv", "".join(f"text {n}\t{label}\n" for n, label in enumerate(labels)))
    examples, _ = read_examples(path)
    with pytest.raises(DataError, match=rf"{path}: labels {message}.*write each label one way"):
        LabelMap.from_examples(examples, path)
    # Labels that only look alike stay distinct classes.
    assert LabelMap.from_examples([e for e in examples if e.label in ("neg", "0", "1")], path).names


def test_distinct_labels_stay_classes():
    examples = [Example("a", None, label, n) for n, label in enumerate(["1", "10", "-1", "neg", "negative"])]
    assert LabelMap.from_examples(examples).names == ["-1", "1", "10", "neg", "negative"]
