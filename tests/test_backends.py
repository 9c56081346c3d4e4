"""kbert on JAX and PyTorch, in a process where TensorFlow cannot be imported.

Each case runs a fresh Python with `KERAS_BACKEND` set and `tensorflow`
blocked in `sys.modules`, so an import of TensorFlow anywhere on the path
fails the test. The rest of the suite runs on any backend too:
`KERAS_BACKEND=jax pytest tests/test_zoo_layers.py ...` (see docs/backends.md).
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import CONFIGS, REPO, shared_path, write_task_data

BACKENDS = [pytest.param(name, marks=pytest.mark.skipif(importlib.util.find_spec(name) is None,
                                                        reason=f"{name} is not installed (pip install "
                                                               f"'{'jax[cpu]' if name == 'jax' else name}')"))
            for name in ("jax", "torch")]
WITHOUT_TENSORFLOW = "import sys; sys.modules['tensorflow'] = None\n"


def run_without_tensorflow(backend: str, code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", WITHOUT_TENSORFLOW + code], capture_output=True, text=True,
                          env=env, cwd=str(REPO), timeout=600)


@pytest.mark.parametrize("backend", BACKENDS)
def test_build_predict_and_summary_without_tensorflow(backend):
    result = run_without_tensorflow(backend, f"""
import json, numpy as np, keras, kbert
from kbert.cli.main import main
bert = kbert.build_transformer_model({str(CONFIGS / 'bert_tiny.json')!r}, with_mlm=True)
tokens = np.array([[101, 872, 1962, 102, 0]])
probabilities = keras.ops.convert_to_numpy(bert.predict([tokens, tokens * 0], verbose=0))
print(json.dumps({{"backend": keras.backend.backend(), "shape": list(probabilities.shape),
                  "sums": probabilities.sum(-1).round(4).tolist()}}))
assert main(["summary"]) == 0
""")
    assert result.returncode == 0, result.stderr[-3000:]
    first = json.loads(result.stdout.splitlines()[0])
    assert first == {"backend": backend, "shape": [1, 5, 21128], "sums": [[1.0] * 5]}
    assert "Total params: 101,678,594" in result.stdout
    assert f"Keras backend: {backend}" in result.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_google_checkpoint_without_tensorflow_is_one_clear_error(backend):
    checkpoint = shared_path("fixtures", "google_tiny")
    result = run_without_tensorflow(backend, f"""
from kbert.cli.main import main
raise SystemExit(main(["summary", {str(checkpoint / "bert_config.json")!r},
                       "--checkpoint", {str(checkpoint)!r}]))
""")
    assert result.returncode == 2, result.stderr[-3000:]
    assert ("kbert: error: reading a Google (TF) checkpoint needs TensorFlow, which this environment lacks: "
            "pip install tensorflow, or convert it to safetensors with `kbert convert`") in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_ids_are_clear_errors_before_a_compiled_step(backend):
    # JAX compiles predict: the model checks the arrays first, and stays usable after.
    result = run_without_tensorflow(backend, f"""
import numpy as np, kbert
from kbert.errors import InputError
bert = kbert.build_transformer_model({str(CONFIGS / 'bert_tiny.json')!r})
for tokens in (np.array([[101, 21128, 102]]), np.array([[1] * 65])):
    try:
        bert.predict([tokens, tokens * 0], verbose=0)
    except InputError as error:
        print(error)
tokens = np.array([[101, 5, 102]])
print(bert.predict([tokens, tokens * 0], verbose=0).shape)
""")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [
        "Embedding-Token (vocab_size): ids must be in [0, 21128); found one of 21128 or more",
        "Embedding-Position: the sequence is longer than max_position_embeddings (64)",
        "(1, 3, 32)"]


def test_the_backend_is_read_as_keras_reads_it(tmp_path, monkeypatch):
    from kbert.cli.main import keras_backend_name

    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    assert keras_backend_name() == "tensorflow"
    (tmp_path / "keras.json").write_text(json.dumps({"backend": "jax"}))
    assert keras_backend_name() == "jax"
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    assert keras_backend_name() == "torch"


@pytest.mark.parametrize("backend", BACKENDS)
def test_train_and_predict_every_task_without_tensorflow(backend, tmp_path):
    """Classification, NER with a CRF and UniLM seq2seq, from the CLI, on the PyDataset pipeline; on JAX the
    compiled steps are kept in kbert's cache."""
    write_task_data(tmp_path)
    (tmp_path / "texts.txt").write_text("张三去北京\n这本书很好看\n", encoding="utf-8")
    common = ["--config", str(CONFIGS / "bert_tiny.json"), "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
              "--epochs", "1", "--batch-size", "16", "--maxlen", "32"]
    result = run_without_tensorflow(backend, f"""
import os
from kbert.cli.main import main
os.chdir({str(tmp_path)!r})
os.environ["KBERT_CACHE"] = "cache"
os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
for task, data in (("classify", "reviews.tsv"), ("ner", "tagged.bmes"), ("seq2seq", "pairs.tsv")):
    extra = ["--head", "crf"] if task == "ner" else []
    assert main(["train", "--task", task, "--train", data, "--out", task, *{common!r}, *extra]) == 0, task
    assert main(["predict", "--json", "--model", task, "texts.txt"]) == 0, task
if {backend!r} == "jax":
    import jax
    assert jax.config.jax_compilation_cache_dir == os.path.abspath("cache/jax"), jax.config.jax_compilation_cache_dir
""")
    assert result.returncode == 0, result.stderr[-3000:]
    predictions = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [sorted(row) for row in predictions] == [["label", "probabilities", "probability", "text"]] * 2 + \
        [["entities", "text"]] * 2 + [["target", "text"]] * 2
    assert {row["label"] for row in predictions[:2]} <= {"0", "1"}
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_pretrain_and_fine_tune_from_it_without_tensorflow(backend, tmp_path):
    """Masks drawn in NumPy, the pre-trained weights written as safetensors, read back by kbert train;
    a family whose weights only Google's format names is refused before anything is read."""
    reviews = shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()[:200]
    (tmp_path / "corpus.txt").write_text("".join(line.split("\t")[0] + "\n" for line in reviews), encoding="utf-8")
    (tmp_path / "labelled.tsv").write_text("\n".join(reviews[:32]) + "\n", encoding="utf-8")
    vocab = str(shared_path("vocab", "chinese_vocab.txt"))
    result = run_without_tensorflow(backend, f"""
import os
from kbert.cli.main import main
os.chdir({str(tmp_path)!r})
common = ["--vocab", {vocab!r}, "--train", "corpus.txt", "--epochs", "2", "--batch-size", "16", "--maxlen", "64"]
assert main(["pretrain", "--config", {str(CONFIGS / "bert_tiny.json")!r}, *common, "--lr", "3e-3",
             "--out", "pretrained"]) == 0
assert main(["train", "--checkpoint", "pretrained", "--train", "labelled.tsv", "--epochs", "1",
             "--maxlen", "32", "--out", "classifier"]) == 0
assert main(["pretrain", "--model", "roformer_v2", "--config", {str(CONFIGS / "bert_tiny.json")!r}, *common,
             "--out", "refused"]) == 2
""")
    assert result.returncode == 0, result.stderr[-3000:]
    assert {"model.safetensors", "bert_config.json", "vocab.txt"} <= {path.name for path in (tmp_path / "pretrained").iterdir()}
    history = json.loads((tmp_path / "pretrained" / "training.json").read_text(encoding="utf-8"))["history"]
    assert history[1]["loss"] < history[0]["loss"] - 0.5, history
    assert "kbert pretrain --model roformer_v2 without TensorFlow" in result.stderr
    assert not (tmp_path / "refused").exists() and not (tmp_path / "refused.partial").exists()
    assert "Traceback" not in result.stderr


SMALL = {"vocab_size": 120, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 64, "max_position_embeddings": 64, "type_vocab_size": 2}
# A model of each kind of graph kbert saves: absolute positions with a pooled classifier, rotary
# positions with an MLM head, relative positions and RMS norms in an encoder-decoder, a CRF tagger.
SAVED_MODELS = {
    "bert-classifier": "build_classifier(build_transformer_model(SMALL, with_pool=True), 3)",
    "roformer_v2-mlm": "build_transformer_model(SMALL, model='roformer_v2', with_mlm=True)",
    "t5.1.1": "build_transformer_model(SMALL, model='t5.1.1')",
    "bert-crf": "build_token_classifier(build_transformer_model(SMALL), 5, head='crf')",
}
SAVE_AND_PREDICT = f"""
import sys, numpy as np, keras
from kbert import build_transformer_model
from kbert.builder import build_classifier, build_token_classifier
SMALL = {SMALL!r}
tokens = np.array([[2, 8, 9, 3, 0, 0], [2, 5, 6, 7, 8, 3]], dtype="int32")
def inputs(model):
    return [tokens, tokens * 0] if len(model.inputs) == 2 and "t5" not in model.name.lower() else \\
        [tokens, tokens[:, :4]] if len(model.inputs) == 2 else [tokens]
"""


def save_models(directory) -> dict:
    """Each of SAVED_MODELS saved as `.keras` on this backend, with its outputs, run in this process."""
    scope: dict = {}
    exec(SAVE_AND_PREDICT, scope)
    import keras
    import numpy as np

    outputs = {}
    keras.utils.set_random_seed(1)
    for name, code in SAVED_MODELS.items():
        model = eval(code, scope)
        model.save(directory / f"{name}.keras")
        outputs[name] = np.asarray(keras.ops.convert_to_numpy(model.predict(scope["inputs"](model), verbose=0)))
    return outputs


@pytest.mark.parametrize("backend", BACKENDS)
def test_keras_files_load_across_backends(backend, tmp_path):
    """Saved on this process's backend, loaded on JAX/PyTorch without TensorFlow (safe_mode), and back."""
    import keras
    import numpy as np

    here = save_models(tmp_path)
    there = tmp_path / backend
    there.mkdir()
    result = run_without_tensorflow(backend, SAVE_AND_PREDICT + f"""
import json, pathlib
directory = pathlib.Path({str(tmp_path)!r})
for name in {list(SAVED_MODELS)!r}:
    model = keras.models.load_model(directory / f"{{name}}.keras", safe_mode=True)
    np.save(directory / "{backend}" / f"{{name}}.npy", keras.ops.convert_to_numpy(model.predict(inputs(model), verbose=0)))
    model.save(directory / "{backend}" / f"{{name}}.keras")
""")
    assert result.returncode == 0, result.stderr[-3000:]
    scope: dict = {}
    exec(SAVE_AND_PREDICT, scope)
    for name, expected in here.items():
        np.testing.assert_allclose(np.load(there / f"{name}.npy"), expected, atol=1e-5, err_msg=name)
        back = keras.models.load_model(there / f"{name}.keras", safe_mode=True)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(back.predict(scope["inputs"](back), verbose=0)),
                                   expected, atol=1e-5, err_msg=name)


ADVERSARIAL_RUN = """
import numpy as np, keras
from kbert.training.adversarial import adversarial_training, gradient_penalty, virtual_adversarial_training
def model_for(initial, loss="sparse_categorical_crossentropy"):
    tokens = keras.Input((3,), dtype="int32")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(10, 4, name="Embedding-Token")(tokens))
    model = keras.Model(tokens, keras.layers.Dense(2, activation="softmax")(pooled))
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss)
    model.load_weights(initial)
    return model
def weights_after(model, x, y, epochs=2):
    history = model.fit(x, y, batch_size=3, epochs=epochs, verbose=0, shuffle=False)
    return [keras.ops.convert_to_numpy(w) for w in model.weights], history.history["loss"]
X, Y = np.array([[1, 2, 3], [4, 5, 6], [1, 1, 7]]), np.array([0, 1, 1])
def trained(method, initial):
    model = model_for(initial)
    {"fgm": adversarial_training, "gp": gradient_penalty}[method](model, "Embedding-Token", epsilon=0.5)
    return weights_after(model, X, Y)
def vat_properties(initial):
    \"\"\"VAT's step with the labels ignored, and with a vanishing perturbation against the plain step on the
    model's own predictions: the largest weight differences.\"\"\"
    def vat_weights(labels, epsilon):
        model = model_for(initial, "kld")
        virtual_adversarial_training(model, "Embedding-Token", epsilon=epsilon, seed=1)
        return weights_after(model, X, labels, epochs=1)[0]
    plain = model_for(initial, "kld")
    targets = plain.predict(X, verbose=0)
    on_own_predictions = weights_after(plain, X, targets, epochs=1)[0]
    one_hot = np.eye(2)[Y]
    differences = lambda a, b: max(float(np.abs(p - q).max()) for p, q in zip(a, b))
    return (differences(vat_weights(one_hot, 1.0), vat_weights(1 - one_hot, 1.0)),
            differences(vat_weights(one_hot, 1e-9), on_own_predictions),
            differences(vat_weights(one_hot, 1.0), on_own_predictions))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_bert4keras_data_generator_feeds_fit_without_tensorflow(backend):
    result = run_without_tensorflow(backend, """
import numpy as np, keras
from kbert.compat.snippets import DataGenerator, sequence_padding
class Batches(DataGenerator):
    def __iter__(self, random=False):
        batch = []
        for is_end, length in self.sample(random):
            batch.append([1] * length)
            if len(batch) == self.batch_size or is_end:
                yield sequence_padding(batch), np.array([[len(row) % 2] for row in batch])
                batch = []
generator = Batches([3, 3, 9, 4, 2], batch_size=2)
model = keras.Sequential([keras.layers.Embedding(4, 2), keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(2)])
model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(generator.forfit(random=False), steps_per_epoch=len(generator), epochs=2, verbose=0)
endless = generator.forfit(random=False)
print(len(history.history["loss"]), [next(endless)[0].shape[1] for _ in range(4)])
""")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[-2] == "2 [3, 9, 2, 3]"


@pytest.fixture
def initial_weights(tmp_path):
    import keras

    keras.utils.set_random_seed(0)
    tokens = keras.Input((3,), dtype="int32")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(10, 4, name="Embedding-Token")(tokens))
    keras.Model(tokens, keras.layers.Dense(2, activation="softmax")(pooled)).save_weights(
        tmp_path / "initial.weights.h5")
    return tmp_path / "initial.weights.h5"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["fgm", "gp"])
def test_adversarial_steps_give_tensorflows_weights(backend, method, initial_weights, tmp_path):
    import numpy as np

    scope: dict = {}
    exec(ADVERSARIAL_RUN, scope)
    weights, losses = scope["trained"](method, initial_weights)
    result = run_without_tensorflow(backend, ADVERSARIAL_RUN + f"""
weights, losses = trained({method!r}, {str(initial_weights)!r})
np.savez({str(tmp_path / 'there.npz')!r}, *weights, losses=np.array(losses))
""")
    assert result.returncode == 0, result.stderr[-3000:]
    there = np.load(tmp_path / "there.npz")
    np.testing.assert_allclose(there["losses"], losses, rtol=1e-5)
    for index, expected in enumerate(weights):
        np.testing.assert_allclose(there[f"arr_{index}"], expected, atol=1e-6)


@pytest.mark.parametrize("backend", ["tensorflow", *BACKENDS])
def test_virtual_adversarial_training_learns_from_its_own_predictions(backend, initial_weights):
    code = ADVERSARIAL_RUN + f"print(*vat_properties({str(initial_weights)!r}))"
    result = (subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                             env={**os.environ, "KERAS_BACKEND": "tensorflow", "PYTHONPATH": str(REPO)})
              if backend == "tensorflow" else run_without_tensorflow(backend, code))
    assert result.returncode == 0, result.stderr[-3000:]
    labels_ignored, vanishing_perturbation, real_perturbation = map(float, result.stdout.split()[-3:])
    assert labels_ignored == 0.0
    assert vanishing_perturbation < 1e-6
    assert real_perturbation > 1e-3
