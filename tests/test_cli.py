import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import CONFIGS, kbert_in_process, shared_path

# Most commands run in this process (`kbert.cli.main`, as the entry point calls it): a process each would spend
# 4 s of the suite importing TensorFlow. What only a process shows (`python -m kbert`, a closed pipe, Ctrl-C,
# the exported file loaded afresh) runs in one.
kbert = kbert_in_process


def kbert_process(*args):
    return subprocess.run([sys.executable, "-m", "kbert", *map(str, args)], capture_output=True, text=True,
                          timeout=600)


def test_summary_default_is_the_mission_classifier():
    result = kbert_process("summary")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Total params: 101,678,594" in out
    # Keras's table is printed wide enough to show every bert4keras name whole.
    assert "│ Transformer-11-MultiHeadSelfAttention-Norm " in out
    assert "│ CLS-token (TakeToken)" in out and "│ dense_output (Dense)" in out
    assert "dense_output                                H·C + C = 768·2 + 2" in out
    assert "✓ all 53 rows agree with the built model (total 101,678,594)" in out
    assert "✗" not in out


def test_params_large():
    result = kbert("params", CONFIGS / "bert_large_chinese.json")
    assert result.returncode == 0
    assert "  total          324,472,832  100.0 %" in result.stdout


def test_params_uncased_pool_groups():
    result = kbert("params", "bert_base_uncased", "--pool")
    lines = result.stdout.splitlines()
    assert "  embeddings      23,837,184   21.8 %" in lines
    assert "  encoder         85,054,464   77.7 %" in lines
    assert "  pooler             590,592    0.5 %" in lines
    assert "  total          109,482,240  100.0 %" in lines


def test_params_claim():
    result = kbert("params", CONFIGS / "bert_base_chinese.json", "--claim", 75641856)
    assert result.returncode == 0
    assert result.stdout.endswith(
        "Claimed 75,641,856; the model has 101,677,056 (-26,035,200).\n"
        "Explanation:\n"
        "  - attention weights counted for one block instead of L: (L−1)·4·H·H = 25,952,256\n"
        "  - attention biases left out: L·4·H = 36,864\n"
        "  - feed-forward biases left out: L·(I + H) = 46,080\n"
        "  75,641,856 + 25,952,256 + 36,864 + 46,080 = 101,677,056\n")


def test_params_json():
    result = kbert("params", CONFIGS / "bert_base_chinese.json", "--num-labels", 2, "--json")
    payload = json.loads(result.stdout)
    assert payload["total"] == 101_678_594
    assert payload["layers"][-1] == {
        "name": "dense_output", "group": "heads", "formula": "H·C + C", "params": 1538,
        "note": "reads CLS-token", "expanded": "768·2 + 2"}


@pytest.mark.parametrize("args, message", [
    (["params", "missing.json"], "kbert: error: missing.json: config file not found (bundled configs: "),
    (["summary", "nope"], "kbert: error: nope: config file not found"),
])
def test_errors_exit_2(args, message):
    result = kbert(*args)
    assert result.returncode == 2
    assert result.stderr.startswith(message)
    assert "Traceback" not in result.stderr


def test_bad_config_value_exit_2(tmp_path):
    values = json.loads((CONFIGS / "bert_tiny.json").read_text())
    values["hidden_size"] = 30
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(values))
    result = kbert("summary", path)
    assert result.returncode == 2
    assert result.stderr == (f"kbert: error: {path}: key 'num_attention_heads': "
                             "4 does not divide hidden_size 30\n")


def test_inspect_google_checkpoint(tiny_checkpoint_dir):
    result = kbert("inspect", tiny_checkpoint_dir / "bert_model.ckpt.index")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"{tiny_checkpoint_dir / 'bert_model.ckpt'} (Google checkpoint, read as model='bert')"
    rows = {line.split()[0]: line.split()[-1] for line in lines[2:-2]}
    assert rows["cls/seq_relationship/output_weights"] == "NSP-Proba/kernel"
    assert rows["bert/encoder/layer_1/intermediate/dense/kernel"] == \
        "Transformer-1-FeedForward/intermediate/kernel"
    assert rows["bert/embeddings/word_embeddings/adam_m"] == "unused"
    [row] = [line.split(None, 1)[1] for line in lines if line.startswith("bert/embeddings/word_embeddings ")]
    assert row.split() == ["[15,", "4]", "float32", "Embedding-Token/embeddings"]
    assert lines[-1] == ("139 variables, 2,104 values in all; 701 parameters map to kbert layers, "
                         "93 variables unused")


def test_summary_with_checkpoint(tiny_checkpoint_dir):
    result = kbert("summary", tiny_checkpoint_dir / "bert_config.json", "--nsp", "--mlm",
                   "--checkpoint", tiny_checkpoint_dir)
    assert result.returncode == 0, result.stderr
    assert "Total params: 701" in result.stdout
    assert "✓ all 17 rows agree with the built model (total 701)" in result.stdout
    assert "not used by the model: 92 optimizer slots (adam_m/adam_v), global_step" in result.stderr


def test_checkpoint_error_exit_2(tiny_checkpoint_dir, tmp_path):
    values = json.loads((tiny_checkpoint_dir / "bert_config.json").read_text())
    values["vocab_size"] = 30522
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps(values))
    result = kbert("summary", config, "--checkpoint", tiny_checkpoint_dir)
    assert result.returncode == 2
    assert "check 'vocab_size' in the config (the checkpoint has 15, the config 30522)" in result.stderr
    assert "Traceback" not in result.stderr


def test_convert_needs_a_config(tmp_path, tiny_checkpoint_dir):
    import shutil
    for name in ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001"):
        shutil.copy(tiny_checkpoint_dir / name, tmp_path / name)
    result = kbert("convert", tmp_path, tmp_path / "out")
    assert result.returncode == 2
    assert result.stderr == (f"kbert: error: {tmp_path}: no bert_config.json or config.json beside "
                             "bert_model.ckpt; pass the config explicitly\n")
    result = kbert("convert", tmp_path, tmp_path / "out", "--config", tiny_checkpoint_dir / "bert_config.json")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == (f"  46 variables, 701 parameters; config "
                                             f"{tmp_path / 'out' / 'config.json'}")


@pytest.fixture(scope="module")
def trained_model(tmp_path_factory):
    """A model directory of one quick epoch on 400 real reviews, trained through the CLI."""
    from conftest import shared_path
    directory = tmp_path_factory.mktemp("cli")
    lines = shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()
    (directory / "train.data").write_text("\n".join(lines[:400]) + "\n", encoding="utf-8")
    (directory / "valid.data").write_text("\n".join(lines[400:500]) + "\n", encoding="utf-8")
    result = kbert("train", "--config", CONFIGS / "bert_tiny.json", "--vocab", shared_path("vocab", "chinese_vocab.txt"),
                   "--train", directory / "train.data", "--valid", directory / "valid.data", "--epochs", 1,
                   "--maxlen", 32, "--lr", "1e-3", "--out", directory / "model")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith(
        f"saved {directory / 'model'} (epoch 1, validation accuracy 0.")
    assert "13/13" in result.stdout  # Keras's own progress bar: 400 examples in batches of 32
    return directory / "model"


def test_evaluate_predict_export(trained_model, tmp_path):
    data = trained_model.parent
    result = kbert("evaluate", "--model", trained_model, "--data", data / "valid.data")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[0] == f"{data / 'valid.data'}: 100 examples (tab-separated, no header: text, label)"
    assert out[1].startswith("accuracy 0.")
    assert out[3].split() == ["label", "precision", "recall", "f1", "support"]
    assert out[-4] == "confusion matrix (rows: true label, columns: predicted)"

    texts = "这家酒店很好，服务周到\n太差了，再也不来了\n"
    result = kbert("predict", "--model", trained_model, "--json", "-", stdin=texts)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["text"] for row in rows] == texts.split()
    assert all(row["label"] in ("0", "1") and 0.5 <= row["probability"] <= 1 for row in rows)

    result = kbert("export", "--model", trained_model, tmp_path / "serving")
    assert result.returncode == 0 and (tmp_path / "serving" / "saved_model.pb").exists()


def test_predict_into_a_closed_pipe_stops_quietly(trained_model, tmp_path):
    """`kbert predict ... | head -1`: the reader leaves early; no error line, no traceback."""
    texts = tmp_path / "texts.txt"
    texts.write_text("".join(f"很好的书，第{n}本\n" for n in range(5000)), encoding="utf-8")
    process = subprocess.Popen([sys.executable, "-m", "kbert", "predict", "--model", str(trained_model), str(texts)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = process.stdout.readline()
    process.stdout.close()  # as head does after its line
    error = process.stderr.read()
    assert process.wait(timeout=600) == 1
    assert first.count("\t") == 1 and "Broken pipe" not in error and "Traceback" not in error, error


def test_predict_evaluate_export_in_bf16(trained_model, tmp_path):
    data = trained_model.parent / "valid.data"
    probabilities, labels = {}, {}
    for precision in ([], ["--mixed-precision", "bf16"]):
        result = kbert("predict", "--model", trained_model, "--json", data, *precision)
        assert result.returncode == 0, result.stderr
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        probabilities[bool(precision)] = np.array([row["probability"] for row in rows])
        labels[bool(precision)] = [row["label"] for row in rows]
    assert len(probabilities[True]) == 100
    # bfloat16 keeps 8 bits of mantissa: close to float32, but not equal.
    difference = np.abs(probabilities[True] - probabilities[False])
    assert 0 < difference.max() < 0.05, difference.max()

    result = kbert("evaluate", "--model", trained_model, "--data", data, "--json", "--mixed-precision", "bf16")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    predicted_counts = np.sum(report["confusion"], axis=0).tolist()
    assert predicted_counts == [labels[True].count(name) for name in report["labels"]]
    result = kbert("export", "--model", trained_model, tmp_path / "bf16.keras", "--mixed-precision", "bf16")
    assert result.returncode == 0, result.stderr
    # In a fresh process, as a user would load it: `import kbert` alone loads no layers.
    check = ("import sys, kbert; model = kbert.load_keras_model(sys.argv[1]); "
             "print(model.get_layer('Transformer-0-FeedForward').compute_dtype, model.output.dtype)")
    result = subprocess.run([sys.executable, "-c", check, str(tmp_path / "bf16.keras")],
                            capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.split() == ["bfloat16", "float32"], result.stderr[-2000:]


def test_train_reads_a_hugging_face_directory_as_its_vocabulary(tmp_path):
    """`--vocab` a model directory with only Hugging Face's tokenizer.json: the model keeps a vocab.txt."""
    tokens = shared_path("vocab", "chinese_vocab.txt").read_text(encoding="utf-8").rstrip("\n").split("\n")
    (tmp_path / "hub").mkdir()
    (tmp_path / "hub" / "tokenizer.json").write_text(json.dumps(
        {"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {token: index for index, token in enumerate(tokens)}}}),
        encoding="utf-8")
    lines = shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()
    (tmp_path / "train.data").write_text("\n".join(lines[:64]) + "\n", encoding="utf-8")
    result = kbert("train", "--config", CONFIGS / "bert_tiny.json", "--vocab", tmp_path / "hub", "--train",
                   tmp_path / "train.data", "--epochs", 1, "--maxlen", 16, "--out", tmp_path / "model")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "model" / "vocab.txt").read_text(encoding="utf-8").rstrip("\n").split("\n") == tokens
    (tmp_path / "review.txt").write_text("房间很干净\n", encoding="utf-8")
    result = kbert("predict", "--model", tmp_path / "model", tmp_path / "review.txt")
    assert result.returncode == 0, result.stderr


def test_train_bad_data_exit_2(tmp_path):
    from conftest import shared_path
    (tmp_path / "train.csv").write_text("sentence2,label\nok,1\n", encoding="utf-8")
    result = kbert("train", "--config", CONFIGS / "bert_tiny.json", "--vocab",
                   shared_path("vocab", "chinese_vocab.txt"), "--train", tmp_path / "train.csv",
                   "--maxlen", 32, "--out", tmp_path / "model")
    assert result.returncode == 2
    assert result.stderr == (f"kbert: error: {tmp_path / 'train.csv'}, line 1: the header has no column for "
                             "text (found: sentence2, label); name it with --columns text=COLUMN, or rename "
                             "the column to one of text, sentence, text_a, sentence1, content, review\n")
    result = kbert("predict", "--model", tmp_path / "nowhere", "-")
    assert result.returncode == 2
    assert result.stderr.startswith(f"kbert: error: {tmp_path / 'nowhere'}: no such directory; expected a model "
                                    "directory of kbert train or kbert pretrain, a sentence-transformers folder")
    (tmp_path / "empty").mkdir()
    result = kbert("predict", "--model", tmp_path / "empty", "-")
    assert result.returncode == 2
    assert f"{tmp_path / 'empty'}: holds no model (no training.json, bert_config.json or modules.json)" \
        in result.stderr
    (tmp_path / "empty" / "bert_config.json").write_text("{}", encoding="utf-8")  # a kbert directory, half there
    result = kbert("predict", "--model", tmp_path / "empty", "-")
    assert "not a kbert model directory (no model.weights.h5)" in result.stderr


def test_every_option_says_its_default():
    import argparse
    from kbert.cli.arguments import HelpWithDefaults
    from kbert.cli.main import build_parser
    parser = build_parser()
    [commands] = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    for name, command in commands.choices.items():
        formatter = HelpWithDefaults(name)
        for action in command._actions:
            if action.required or isinstance(action, argparse._HelpAction) \
                    or (not action.option_strings and action.nargs != "?"):
                continue
            assert "default" in formatter._get_help_string(action), f"kbert {name} {action.dest}"
    assert "(default: 32)" in " ".join(commands.choices["train"].format_help().split())


@pytest.mark.parametrize("args", [["train", "--config", "c", "--vocab", "v", "--train", "t", "--out", "o",
                                   "--batch-size", "0"],
                                  ["predict", "--model", "m", "--batch-size", "-3"],
                                  ["evaluate", "--model", "m", "--data", "d", "--batch-size", "x"]])
def test_batch_size_must_be_positive(args):
    result = kbert(*args)
    assert result.returncode == 2
    assert "argument --batch-size: expected a positive integer, got" in result.stderr


@pytest.mark.parametrize("data, message", [
    (b"", "kbert: error: standard input: no texts to predict (expected one text a line)\n"),
    (b"\n  \n", "kbert: error: standard input: no texts to predict (expected one text a line)\n"),
    ("好".encode("gbk") + b"\n", "kbert: error: standard input: not UTF-8 text (invalid start byte at byte 0)\n"),
])
def test_predict_standard_input_errors(trained_model, data, message):
    result = kbert("predict", "--model", trained_model, "-", stdin=data)
    assert result.returncode == 2
    assert result.stderr == message


def test_ctrl_c_tells_the_truth(tmp_path):
    import os
    import signal
    from conftest import shared_path
    lines = shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()
    (tmp_path / "train.data").write_text("\n".join(lines[:3000]) + "\n", encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-m", "kbert", "train", "--config", str(CONFIGS / "bert_tiny.json"), "--vocab",
         str(shared_path("vocab", "chinese_vocab.txt")), "--train", str(tmp_path / "train.data"), "--batch-size",
         "8", "--maxlen", "64", "--out", str(tmp_path / "model")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        # As in a terminal: a shell starts background jobs (CI may run us as one) with SIGINT
        # ignored, and Python then installs no Ctrl-C handler.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    started = False
    for line in process.stdout:  # the first progress line: training has started
        if b"Epoch 1/" in line:
            started = True
            break
    assert started, process.communicate(timeout=300)[1].decode()[-2000:]
    process.send_signal(signal.SIGINT)
    stderr = process.communicate(timeout=300)[1].decode()
    assert process.returncode == 130, stderr[-2000:]
    # TensorFlow's C++ runtime may log while the process shuts down; what kbert says is what is checked.
    assert "Traceback" not in stderr, stderr[-2000:]
    said = [line for line in stderr.splitlines() if line.startswith("kbert:")]
    assert said == [f"kbert: {tmp_path / 'train.data'}: 3000 examples (tab-separated, no header: text, label)",
                    f"kbert: interrupted before the first epoch completed: nothing was kept, and "
                    f"{tmp_path / 'model'} was not created"], stderr[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["train.data"]


def test_convert_never_mixes_two_models(tmp_path, tiny_checkpoint_dir):
    other = tmp_path / "other-model"
    other.mkdir()
    (other / "vocab.txt").write_text("someone else's vocabulary\n")
    result = kbert("convert", tiny_checkpoint_dir, other)
    assert result.returncode == 2
    assert result.stderr == (f"kbert: error: {other}: already exists and is not empty; converting into it "
                             "would mix two models' files. Choose a new directory, or pass --overwrite to "
                             "replace it\n")
    assert os.listdir(other) == ["vocab.txt"]
    result = kbert("convert", tiny_checkpoint_dir, other, "--overwrite")
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(other)) == ["config.json", "model.safetensors", "vocab.txt"]
    assert (other / "vocab.txt").read_text() == (tiny_checkpoint_dir / "vocab.txt").read_text()
    umask = os.umask(0)
    os.umask(umask)
    assert other.stat().st_mode & 0o777 == 0o777 & ~umask  # a directory as mkdir makes it, not mkdtemp's 0700
    assert [p.name for p in tmp_path.iterdir()] == ["other-model"]  # no temporary directory left


def test_convert_or_train_into_the_directory_it_runs_in_is_refused(tmp_path, tiny_checkpoint_dir, monkeypatch):
    """`kbert convert SRC . --overwrite` from inside the target: refused with the reason, nothing left beside it."""
    target = tmp_path / "target"
    (target / "inner").mkdir(parents=True)
    (target / "notes.txt").write_text("mine\n")
    (tmp_path / "x.tsv").write_text("很好\t1\n很差\t0\n" * 4, encoding="utf-8")
    for where, out in ((target, "."), (target / "inner", "..")):
        monkeypatch.chdir(where)
        result = kbert("convert", tiny_checkpoint_dir, out, "--overwrite")
        assert result.returncode == 2 and "is the current directory or holds it" in result.stderr, result.stderr
        result = kbert("train", "--config", CONFIGS / "bert_tiny.json", "--vocab", tiny_checkpoint_dir / "vocab.txt",
                       "--train", tmp_path / "x.tsv", "--out", out, "--overwrite")
        assert result.returncode == 2 and "is the current directory or holds it" in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target", "x.tsv"]  # no .old- or .tmp- folder
    assert (target / "notes.txt").read_text() == "mine\n"


@pytest.mark.parametrize("name, total", [("albert_tiny_zh", 3_982_864), ("electra_small_zh", 12_280_576),
                                         ("nezha_base_zh", 101_292_096), ("roformer_base_zh", 123_457_536)])
def test_params_of_every_family_from_the_bundled_configs(name, total):
    result = kbert("params", name, "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["total"] == total and payload["model"] == name.split("_")[0]


def test_summary_of_a_family_checks_every_row(tmp_path):
    result = kbert("summary", "albert_tiny_zh", "--mlm", "--nsp")
    assert result.returncode == 0, result.stderr
    assert "✓ all 14 rows agree with the built model (total 4,142,594)" in result.stdout
    assert re.search(r"Embedding-Mapping +E·H \+ H = 128·312 \+ 312 +40,248 +40,248 +✓", result.stdout)


def test_inspect_recognises_albert_and_electra_names():
    for case, family, row in [("albert_tiny", "albert", "Transformer-FeedForward/intermediate/kernel"),
                              ("electra_tiny", "electra", "Discriminator-Prediction/kernel")]:
        result = kbert("inspect", shared_path("fixtures", "bert4keras_families", case))
        assert result.returncode == 0, result.stderr
        assert f"read as model='{family}'" in result.stdout.splitlines()[0]
        assert row in result.stdout and result.stdout.rstrip().endswith(", 0 variables unused")


def test_wrong_family_is_a_clear_error():
    result = kbert("summary", str(shared_path("fixtures", "bert4keras_families", "albert_tiny", "config.json")),
                   "--checkpoint", str(shared_path("fixtures", "bert4keras_families", "albert_tiny")))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "build the model with model='albert'" in result.stderr


def test_predict_with_the_weights_in_bfloat16(trained_model):
    """A model directory's float32 weights held in bfloat16 (`--dtype`): nearly the same probabilities."""
    data = trained_model.parent / "valid.data"
    probabilities = {}
    for dtype in ("float32", "bfloat16"):
        result = kbert("predict", "--model", trained_model, "--json", data, "--dtype", dtype)
        assert result.returncode == 0, result.stderr
        probabilities[dtype] = np.array([json.loads(line)["probability"] for line in result.stdout.splitlines()])
    difference = np.abs(probabilities["bfloat16"] - probabilities["float32"])
    assert len(difference) == 100 and 0 < difference.max() < 0.05, difference.max()


def test_each_tasks_options_come_from_the_task_table_and_reach_its_training_options():
    """`kbert train` and `kbert pretrain` add each task's options from `kbert.tasks.arguments` (none is written
    in a CLI module), each naming its tasks, and every value given reaches its `TrainingOptions` field."""
    import argparse
    import dataclasses
    from kbert.cli.main import build_parser
    from kbert.cli.train import _task_values
    from kbert.tasks import TASKS
    from kbert.tasks.arguments import TASK_OPTIONS
    from kbert.training.options import TrainingOptions

    fields = {field.name for field in dataclasses.fields(TrainingOptions)}
    assert {option.field for option in TASK_OPTIONS} <= fields
    assert {task for option in TASK_OPTIONS for task in option.tasks} <= set(TASKS)
    parser = build_parser()
    [commands] = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    train_help = " ".join(commands.choices["train"].format_help().split())
    for option in TASK_OPTIONS:
        command = "pretrain" if option.tasks == ("mlm",) else "train"
        flags = {flag for action in commands.choices[command]._actions for flag in action.option_strings}
        assert option.flag in flags, (command, option.flag)
        if command == "train":
            assert option.described.split(":")[0] in train_help
    args = parser.parse_args(["train", "--config", "c", "--vocab", "v", "--train", "t", "--out", "o", "--task",
                              "rerank", "--group-size", "8", "--temperature", "0.5", "--inference-free"])
    values = _task_values(args, "rerank", "sparse")
    assert (values["group_size"], values["temperature"], values["inference_free"]) == (8, 0.5, True)
    pretrain = parser.parse_args(["pretrain", "--config", "c", "--vocab", "v", "--train", "t", "--out", "o",
                                  "--pack", "documents"])
    defaults = TrainingOptions.for_pretraining()
    assert _task_values(pretrain, "mlm") == {"whole_word": defaults.whole_word, "mask_rate": defaults.mask_rate,
                                             "pack": "documents"}
