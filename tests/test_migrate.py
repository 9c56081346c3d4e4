"""`kbert migrate`: the codemod on bert4keras's own 32 examples and on small scripts."""

import ast

import pytest

from conftest import kbert_in_process, shared_path
from kbert.compat.migrate import migrate_source
from kbert.errors import KbertError


def examples():
    return sorted(shared_path("bert4keras_examples").glob("*.py"))


def test_every_example_migrates_idempotently_to_python_without_bert4keras():
    scripts = examples()
    assert len(scripts) == 32
    for script in scripts:
        migration = migrate_source(script.read_text(encoding="utf-8"), str(script))
        tree = ast.parse(migration.source)
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not any(module.startswith("bert4keras") for module in imported if module), script.name
        again = migrate_source(migration.source, str(script))
        assert again.source == migration.source, script.name
        assert all(not finding.fixed for finding in again.findings), script.name


def test_no_example_needs_a_manual_change():
    manual = {script.name for script in examples()
              if migrate_source(script.read_text(encoding="utf-8")).manual}
    # Integrated gradients' K.gradients sits in a layer's call(), where it runs on TensorFlow.
    assert manual == set()


SCRIPT = '''import keras.backend as K
from bert4keras.optimizers import Adam, extend_with_exponential_moving_average
import bert4keras.snippets
AdamEMA = extend_with_exponential_moving_average(Adam, name='AdamEMA')
optimizer = AdamEMA(lr=1e-5)  # 学习率
output = model.layers[-2].get_output_at(-1)
model.fit_generator(generator.forfit(), steps_per_epoch=10)
model.save_weights('best.weights')
model.load_weights('best.weights')
model.save("test.model")
other.save_weights(u"final.h5")
np.save("counts.npy", counts)
grads = K.gradients(loss, [embeddings])
x = bert4keras.snippets.to_array([1])
preds = model.predict([[token_ids], [segment_ids]])[0]
probabilities = model.predict([tokens, segments])
class Gradient(keras.layers.Layer):
    def call(self, inputs):
        return K.gradients(inputs[1], [inputs[0]])[0] * inputs[0]
'''


def test_each_rewrite_and_each_manual_report():
    migration = migrate_source(SCRIPT)
    assert migration.source == '''import kbert.compat.keras2 as K
from kbert.compat.optimizers import Adam, extend_with_exponential_moving_average
import kbert.compat.snippets
from kbert.compat.snippets import to_array
from kbert.compat.backend import get_output_at
AdamEMA = extend_with_exponential_moving_average(Adam, name='AdamEMA')
optimizer = AdamEMA(learning_rate=1e-5)  # 学习率
output = get_output_at(model.layers[-2], -1)
model.fit(generator.forfit(), steps_per_epoch=10)
model.save_weights('best.weights.h5')
model.load_weights('best.weights.h5')
model.save("test.keras")
other.save_weights(u"final.weights.h5")
np.save("counts.npy", counts)
grads = K.gradients(loss, [embeddings])
x = kbert.compat.snippets.to_array([1])
preds = model.predict(to_array([token_ids], [segment_ids]))[0]
probabilities = model.predict([tokens, segments])
class Gradient(keras.layers.Layer):
    def call(self, inputs):
        return K.gradients(inputs[1], [inputs[0]])[0] * inputs[0]
'''
    [manual] = migration.manual  # K.gradients at the top level; in a layer's call() it runs
    assert manual.line == 13 and "the backend's autodiff" in manual.message
    assert migrate_source(migration.source).source == migration.source


GRAPH_MODE_TRAINING = '''from bert4keras.backend import K, search_layer
def virtual_adversarial_training(model, embedding_name, epsilon=1, xi=10, iters=1):
    gradients = K.gradients(model.total_loss, [embeddings])
    model.train_function = train_function
def loss_with_gradient_penalty(y_true, y_pred, epsilon=0.5):
    loss = K.mean(K.sparse_categorical_crossentropy(y_true, y_pred))
    embeddings = search_layer(y_pred, 'Embedding-Word').embeddings
    return loss + 0.5 * epsilon * K.sum(K.gradients(loss, [embeddings])[0].values**2)
classifier.compile(loss=loss_with_gradient_penalty, optimizer='adam')
other.compile(loss='mse')
virtual_adversarial_training(model_vat, 'Embedding-Token')
'''


def test_graph_mode_vat_and_gradient_penalty_become_train_steps():
    migration = migrate_source(GRAPH_MODE_TRAINING)
    assert migration.source == '''from kbert.compat.backend import K, search_layer
# bert4keras's Keras 2 virtual_adversarial_training: virtual adversarial training as a Keras 3 train step (kbert migrate)
from kbert.compat.adversarial import virtual_adversarial_training
# bert4keras's Keras 2 loss_with_gradient_penalty: the plain loss, its penalty a train step added after compile (kbert migrate)
from kbert.compat.adversarial import gradient_penalty, loss_with_gradient_penalty
classifier.compile(loss=loss_with_gradient_penalty, optimizer='adam')
gradient_penalty(classifier, 'Embedding-Word', epsilon=0.5)  # kbert migrate: the penalty of loss_with_gradient_penalty
other.compile(loss='mse')
virtual_adversarial_training(model_vat, 'Embedding-Token')
'''
    assert not migration.manual
    assert migrate_source(migration.source).source == migration.source
    # the same loss name without K.gradients is the user's own, and stays
    own = "def loss_with_gradient_penalty(y_true, y_pred):\n    return y_pred\nm.compile(loss=loss_with_gradient_penalty)\n"
    assert migrate_source(own).source == own


def test_a_python2_script_is_a_clear_error():
    with pytest.raises(KbertError, match=r"old.py:1: not Python 3 .*2to3"):
        migrate_source("print 'hello'\n", "old.py")


def test_cli_shows_a_diff_by_default_and_never_overwrites(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("from bert4keras.snippets import open\nmodel.save_weights('a.weights')\n", encoding="utf-8")
    shown = kbert_in_process("migrate", script)
    assert shown.returncode == 0
    assert "+from kbert.compat.snippets import open" in shown.stdout
    assert "2 changes, 0 places need a manual change (nothing written" in shown.stderr
    output = tmp_path / "train_kbert.py"
    assert kbert_in_process("migrate", script, "-o", output).returncode == 0
    assert "a.weights.h5" in output.read_text(encoding="utf-8")
    refused = kbert_in_process("migrate", script, "-o", output)
    assert refused.returncode == 2 and "exists; pass --overwrite" in refused.stderr
    assert kbert_in_process("migrate", script, "--in-place").returncode == 0
    assert script.read_text(encoding="utf-8") == output.read_text(encoding="utf-8")
    assert set(tmp_path.iterdir()) == {script, output}  # no temporary file left behind


SMALL_SCRIPT = "from bert4keras.models import build_transformer_model\r\nmodel = build_transformer_model('c.json')\r\n"


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"], ids=["plain", "byte-order mark"])
@pytest.mark.parametrize("newline", ["\r\n", "\n"], ids=["CRLF", "LF"])
def test_in_place_keeps_the_files_bytes_but_the_code(tmp_path, bom, newline):
    script = tmp_path / "task.py"
    script.write_bytes(bom + SMALL_SCRIPT.replace("\r\n", newline).encode("utf-8"))
    script.chmod(0o755)
    assert kbert_in_process("migrate", "--in-place", str(script)).returncode == 0
    written = script.read_bytes()
    assert written.startswith(bom) and not written[len(bom):].startswith(b"\xef\xbb\xbf")
    assert written.count(newline.encode()) == 2 and (newline == "\r\n" or b"\r" not in written)
    assert b"from kbert.compat.models import build_transformer_model" in written
    assert script.stat().st_mode & 0o777 == 0o755


def test_in_place_on_a_link_rewrites_its_target_and_keeps_the_link(tmp_path):
    target = tmp_path / "real" / "task.py"
    target.parent.mkdir()
    target.write_text(SMALL_SCRIPT.replace("\r\n", "\n"), encoding="utf-8")
    link = tmp_path / "task.py"
    link.symlink_to(target)
    assert kbert_in_process("migrate", "--in-place", str(link)).returncode == 0
    assert link.is_symlink() and link.resolve() == target
    assert "kbert.compat.models" in target.read_text(encoding="utf-8")


@pytest.mark.parametrize("line, migrated", [
    # The case: K.set_value on the optimizer's lr.
    ("K.set_value(model.optimizer.lr, 1e-5)", "K.set_value(model.optimizer.learning_rate, 1e-5)"),
    # Neighbours: K.get_value, a plain read, an optimizer held in a variable; and an lr that is not one.
    ("rate = K.get_value(self.model.optimizer.lr)", "rate = K.get_value(self.model.optimizer.learning_rate)"),
    ("print(optimizer.lr)", "print(optimizer.learning_rate)"),
    ("print(config.lr)", "print(config.lr)"),
])
def test_the_optimizers_learning_rate_attribute(line, migrated):
    migration = migrate_source(f"from keras import backend as K\n{line}\n")
    assert migration.source.splitlines()[-1] == migrated
    assert not migration.manual


def test_tf_function_is_not_keras_function():
    migration = migrate_source("import tensorflow as tf\nfrom keras import backend as K\n\n@tf.function\n"
                               "def step(x):\n    return x\n\nf = K.function([a], [b])\n")
    assert [finding.line for finding in migration.manual] == [8]  # K.function only
