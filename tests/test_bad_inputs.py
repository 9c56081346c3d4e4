"""Bad inputs, table-driven: each case is a `kbert` command, its input files, and the required outcome.

The outcome: the exit status, fragments of what is printed (stderr and
stdout together), and files that must be left byte for byte as they were.
No case may end in a traceback: the command runs in this process
(`kbert_in_process`), so an exception that escapes `kbert.cli.main` fails the case. Model directories of
each task are trained once, tiny, at the start.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
from typing import Callable, Dict, List, Optional, Tuple

import pytest

from conftest import CONFIGS, kbert_in_process, shared_path

CHARS = "张三在北京大学读书李四去了上海"


def snapshot(path: pathlib.Path) -> Dict[str, bytes]:
    """Every file under `path` (or the file itself) with its bytes."""
    if path.is_file():
        return {str(path): path.read_bytes()}
    return {str(file): file.read_bytes() for file in sorted(path.rglob("*")) if file.is_file()}


def tagged(sentences: List[List[Tuple[str, str]]]) -> str:
    return "\n".join("".join(f"{token}\t{tag}\n" for token, tag in sentence) for sentence in sentences)


def ner_rows(count: int, extra: List[Tuple[str, str]] = ()) -> str:
    base = [("张", "B-PER"), ("三", "E-PER"), ("在", "O"), ("北", "B-LOC"), ("京", "E-LOC"), *extra]
    return tagged([base] * count)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """Tiny model directories of each task, and their data, trained through the command line."""
    root = tmp_path_factory.mktemp("bad-inputs")
    reviews = shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()
    (root / "reviews.tsv").write_text("\n".join(reviews[:64]) + "\n", encoding="utf-8")
    # Character-level, with one token of several characters (MSRA has a few).
    (root / "ner.txt").write_text(ner_rows(23) + "\n" + ner_rows(1, [("１９９７年", "O")]), encoding="utf-8")
    pairs = [f"{CHARS[i:i + 6]}\t{CHARS[i:i + 2]}" for i in range(8)]
    (root / "pairs.tsv").write_text("\n".join(pairs * 4) + "\n", encoding="utf-8")
    common = ["--config", CONFIGS / "bert_tiny.json", "--vocab", shared_path("vocab", "chinese_vocab.txt"),
              "--epochs", 1, "--maxlen", 24, "--lr", "1e-3", "--batch-size", 16]
    for name, task_args, data in [("classify", [], "reviews.tsv"), ("ner", ["--task", "ner"], "ner.txt"),
                                  ("seq2seq", ["--task", "seq2seq"], "pairs.tsv")]:
        result = kbert_in_process("train", *common, *task_args, "--train", root / data, "--out", root / name)
        assert result.returncode == 0, (name, result.stderr[-2000:])
    return root


@dataclasses.dataclass
class Case:
    """A command, its input files, and what it must do.

    `argv` and `unchanged` receive the workspace folder (trained models
    `classify`, `ner`, `seq2seq`, and the case's files).
    """

    id: str
    argv: Callable[[pathlib.Path], list]
    status: int
    says: Tuple[str, ...]
    files: Dict[str, str] = dataclasses.field(default_factory=dict)
    stdin: Optional[str] = None
    unchanged: Callable[[pathlib.Path], list] = lambda w: []
    output: Optional[Callable[[str], bool]] = None  # a check of standard output


def train_args(w, data, *extra):
    return ["train", "--config", CONFIGS / "bert_tiny.json", "--vocab", shared_path("vocab", "chinese_vocab.txt"),
            "--train", w / data, "--out", w / "out", "--epochs", 1, "--maxlen", 24, "--batch-size", 16, *extra]


TWO_LABELS = "".join(f"{text}\t{label}\n" for text, label in [("很好", 1), ("不好", 0)] * 8)

CASES = [
    # --- classification data --------------------------------------------------------------------------
    Case("headerless-tsv-trains", lambda w: train_args(w, "reviews.tsv"), 0,
         ("reviews.tsv: 64 examples (tab-separated, no header: text, label)",)),
    Case("unknown-header-by-elimination", lambda w: train_args(w, "r.tsv"), 0,
         ("r.tsv: 16 examples (tab-separated with a header: text=review, label=sentiment)",),
         files={"r.tsv": "review\tsentiment\n" + TWO_LABELS}),
    Case("unknown-header-with-numeric-labels", lambda w: train_args(w, "h.data"), 2,
         ("h.data, line 1: the row of 'good' labelled 'sentiment' looks like a header",
          "--columns text=COLUMN,label=COLUMN"),
         files={"h.data": "good\tsentiment\n" + TWO_LABELS}),
    Case("columns-name-nothing", lambda w: train_args(w, "r.tsv", "--columns", "label=stars"), 2,
         ("r.tsv, line 1: --columns names 'stars' for label, but the header has review, sentiment",),
         files={"r.tsv": "review\tsentiment\n" + TWO_LABELS}),
    Case("columns-bad-syntax", lambda w: train_args(w, "r.tsv", "--columns", "label"), 2,
         ("--columns: expected FIELD=COLUMN entries",), files={"r.tsv": TWO_LABELS}),
    Case("too-many-num-labels", lambda w: train_args(w, "t.data", "--num-labels", 4), 2,
         ("t.data: 2 labels (0, 1) but --num-labels is 4", "leave out --num-labels"),
         files={"t.data": TWO_LABELS}),
    Case("superscript-label", lambda w: train_args(w, "s.data"), 0, ("s.data: 16 examples",),
         files={"s.data": TWO_LABELS.replace("\t0", "\t²")}),
    # --- sequence labelling ---------------------------------------------------------------------------
    Case("mixed-schemes", lambda w: train_args(w, "mixed.txt", "--task", "ner"), 2,
         ("mixed.txt, line 6: the tags mix BMES's prefix M- (first on line 2) with BIO's prefix I- "
          "(first on line 6)",),
         files={"mixed.txt": tagged([[("张", "B-PER"), ("三", "M-PER"), ("丰", "E-PER")],
                                     [("北", "B-LOC"), ("京", "I-LOC")]])}),
    Case("ner-has-no-columns", lambda w: train_args(w, "ner.txt", "--task", "ner", "--columns", "text=x"), 2,
         ("--columns: a tagger reads token<TAB>tag files",)),
    Case("global-pointer-validation-without-entities",
         lambda w: train_args(w, "ner.txt", "--task", "ner", "--head", "global_pointer", "--valid", w / "o.txt"), 0,
         ("saved",), files={"o.txt": tagged([[("今", "O"), ("天", "O")]] * 3)}),
    # --- prediction input ------------------------------------------------------------------------------
    Case("stdin-blank-lines-keep-their-place", lambda w: ["predict", "--model", w / "classify", "-"], 0, (),
         stdin="很好\n\n不好\u2028真的\n",
         output=lambda out: [bool(line) for line in out.split("\n")] == [True, False, True, False]),
    Case("tab-in-a-prediction-line", lambda w: ["predict", "--model", w / "classify", "--json", w / "texts.txt"], 0,
         ('"text": "很好\\t真的"', "every line of"), files={"texts.txt": "很好\t真的\n不好\t是的\n"}),
    Case("seq2seq-predict-reads-its-own-table",
         lambda w: ["predict", "--model", w / "seq2seq", "--json", w / "sources.tsv"], 0,
         ('"text": "张三在北京"',), files={"sources.tsv": "source\ttarget\n张三在北京\t张三\n"}),
    Case("long-source-is-cut-with-a-warning",
         lambda w: ["predict", "--model", w / "seq2seq", "-"], 0,
         ("1 of 1 sources are longer than",), stdin=CHARS * 4 + "\n"),
    Case("long-training-target-is-counted", lambda w: train_args(w, "long.tsv", "--task", "seq2seq"), 0,
         ("1 pairs longer than --maxlen 24 tokens were cut",),
         files={"long.tsv": f"{CHARS[:4]}\t{CHARS * 2}\n" + "".join(f"{CHARS[:4]}\t{CHARS[:2]}\n" * 7)}),
    # --- model directories -----------------------------------------------------------------------------
    Case("evaluate-with-another-task", lambda w: ["evaluate", "--model", w / "classify", "--task", "ner",
                                                  "--data", w / "ner.txt"], 2,
         ("a model trained for --task classify, not ner",)),
    Case("model-directory-of-an-unknown-task", lambda w: ["predict", "--model", w / "future", "-"], 2,
         ("future",), stdin="x\n"),
    # --- resuming --------------------------------------------------------------------------------------
    Case("resume-with-another-head",
         lambda w: train_args(w, "ner.txt", "--task", "ner", "--head", "softmax", "--resume", "--out",
                              w / "stopped"), 2,
         ("--resume continues a run with the same settings", "head 'crf' (now 'softmax')"),
         unchanged=lambda w: [w / "stopped.partial"]),
    Case("resume-with-another-task", lambda w: train_args(w, "reviews.tsv", "--resume", "--out", w / "stopped"),
         2, ("task 'ner' (now 'classify')",), unchanged=lambda w: [w / "stopped.partial"]),
    Case("resume-with-other-labels",
         lambda w: train_args(w, "other.txt", "--task", "ner", "--resume", "--out", w / "stopped"), 2,
         ("--resume continues a run with the same settings", "labels O, ", "(now O, B-ORG"),
         files={"other.txt": tagged([[("北", "B-ORG"), ("大", "E-ORG")]] * 4)},
         unchanged=lambda w: [w / "stopped.partial"]),
    Case("resume-with-another-maxlen",
         lambda w: train_args(w, "ner.txt", "--task", "ner", "--resume", "--out", w / "stopped") + ["--maxlen", 16],
         2, ("maxlen 24 (now 16)",), unchanged=lambda w: [w / "stopped.partial"]),
    # --- configs and checkpoints -----------------------------------------------------------------------
    Case("odd-head-size-roformer", lambda w: ["summary", w / "odd.json", "--model", "roformer"], 2,
         ("odd.json: key 'num_attention_heads'", "an odd number"),
         files={"odd.json": json.dumps({"vocab_size": 100, "hidden_size": 12, "num_hidden_layers": 1,
                                        "num_attention_heads": 4, "intermediate_size": 16})}),
    Case("odd-head-size-nezha", lambda w: ["summary", w / "odd.json", "--model", "nezha"], 2,
         ("NEZHA's relative positions",),
         files={"odd.json": json.dumps({"vocab_size": 100, "hidden_size": 12, "num_hidden_layers": 1,
                                        "num_attention_heads": 4, "intermediate_size": 16})}),
    Case("convert-into-its-own-directory",
         lambda w: ["convert", w / "ckpt" / "bert_model.ckpt", w / "ckpt", "--overwrite"], 2,
         ("converting into it would replace the source with its own conversion",),
         unchanged=lambda w: [w / "ckpt"]),
    Case("bert-weights-into-nezha",
         lambda w: ["summary", w / "ckpt" / "bert_config.json", "--model", "nezha", "--checkpoint",
                    w / "ckpt" / "bert_model.ckpt"], 2,
         ("holds a position table (bert/embeddings/position_embeddings", "model='nezha' has none"),
         unchanged=lambda w: [w / "ckpt"]),
    Case("inspect-a-text-file", lambda w: ["inspect", w / "ner.txt"], 2, ("ner.txt",)),
]


@pytest.fixture(scope="module")
def prepared(workspace):
    """The workspace plus an interrupted NER run, a tiny Google checkpoint, and a model of an unknown task."""
    from kbert import build_transformer_model
    from kbert.checkpoints.google import save_google_checkpoint
    from kbert.training import loop

    original = loop._BestWeights.on_epoch_end

    def stop_after_the_first_epoch(self, epoch, logs=None):
        original(self, epoch, logs)
        raise KeyboardInterrupt

    loop._BestWeights.on_epoch_end = stop_after_the_first_epoch
    try:
        status = kbert_in_process(*train_args(workspace, "ner.txt", "--task", "ner", "--epochs", 2,
                                              "--out", workspace / "stopped")).returncode
    finally:
        loop._BestWeights.on_epoch_end = original
    assert status == 130 and (workspace / "stopped.partial" / "resume").is_dir()
    (workspace / "ckpt").mkdir()
    save_google_checkpoint(build_transformer_model(CONFIGS / "bert_tiny.json"), workspace / "ckpt" / "bert_model.ckpt")
    shutil.copy(CONFIGS / "bert_tiny.json", workspace / "ckpt" / "bert_config.json")
    shutil.copytree(workspace / "classify", workspace / "future")
    state = json.loads((workspace / "future" / "training.json").read_text())
    (workspace / "future" / "training.json").write_text(json.dumps({**state, "task": "summarise"}))
    return workspace


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input(case: Case, prepared):
    for name, text in case.files.items():
        (prepared / name).write_text(text, encoding="utf-8")
    shutil.rmtree(prepared / "out", ignore_errors=True)
    kept = [snapshot(path) for path in case.unchanged(prepared)]
    result = kbert_in_process(*case.argv(prepared), stdin=case.stdin)
    status, out, printed = result.returncode, result.stdout, result.stdout + result.stderr
    assert status == case.status, printed
    for fragment in case.says:
        assert fragment in printed, (fragment, printed)
    if status == 2:
        assert "Traceback" not in printed and printed.count("kbert: error:") == 1, printed
    assert [snapshot(path) for path in case.unchanged(prepared)] == kept
    if case.output:
        assert case.output(out), printed


def test_a_character_file_with_a_few_words_stays_character_level(prepared):
    from kbert.tasks.ner import predict

    state = json.loads((prepared / "ner" / "training.json").read_text())
    assert state["unit"] == "char"  # ner.txt holds the token １９９７年 among characters
    # Unspaced Chinese is read character by character: no entity spans the whole text.
    (entities,) = predict(str(prepared / "ner"), ["张三在北京读书"])
    assert all(entity["end"] - entity["start"] < 7 for entity in entities)


def test_a_seq2seq_target_does_not_depend_on_the_other_sources(prepared):
    from kbert.tasks.seq2seq import predict

    short = CHARS[:6]
    alone = predict(str(prepared / "seq2seq"), [short])
    assert predict(str(prepared / "seq2seq"), [short, CHARS * 3], batch_size=2)[:1] == alone
    assert predict(str(prepared / "seq2seq"), [short, CHARS[:2]], batch_size=2, beam_size=2)[:1] == \
        predict(str(prepared / "seq2seq"), [short], beam_size=2)


def test_the_memory_check_is_skipped_where_the_os_cannot_say(monkeypatch):
    import os

    from kbert import build_transformer_model

    def unsupported(name):
        raise ValueError(f"unrecognized configuration name {name!r}")

    monkeypatch.setattr(os, "sysconf", unsupported)
    assert build_transformer_model(CONFIGS / "bert_tiny.json").count_params() > 0
