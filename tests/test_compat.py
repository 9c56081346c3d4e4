"""kbert.compat: bert4keras's module layout on Keras 3, checked against bert4keras's formulas."""

import json

import keras
import numpy as np
import pytest
from keras import ops

from kbert.compat import backend, optimizers, snippets
from kbert.compat.backend import K
from kbert.compat.layers import LayerNormalization, Loss
from conftest import REPO, shared_path
from kbert.errors import KbertError
from kbert.training.adversarial import adversarial_training, gradient_penalty
from kbert.training.losses import multilabel_categorical_crossentropy


# -- K: Keras 2's conventions --

def test_keras2_defaults_differ_from_keras_ops_where_keras2_did():
    a, b = np.ones((2, 3)), np.zeros((2, 4))
    assert K.int_shape(K.concatenate([a, b])) == (2, 7)  # Keras 2: the last axis
    assert K.int_shape(K.expand_dims(a)) == (2, 3, 1)
    assert K.eval(K.argmax(np.array([[0, 2, 1]]))).tolist() == [1]


def test_sparse_crossentropy_takes_float_targets_as_bert4keras_inputs_were():
    probabilities = np.array([[0.2, 0.8], [0.6, 0.4]], dtype="float32")
    loss = K.sparse_categorical_crossentropy(np.array([1.0, 0.0], dtype="float32"), probabilities)
    np.testing.assert_allclose(K.eval(loss), -np.log([0.8, 0.6]), rtol=1e-6)


@pytest.mark.parametrize("x_shape, y_shape, axes", [((4, 3), (4, 3), 1), ((4, 2, 3), (4, 3, 5), None),
                                                    ((4, 2, 3), (4, 5, 3), (2, 2)), ((4, 3, 2), (4, 3), (1, 1))])
def test_batch_dot_is_keras2s(x_shape, y_shape, axes):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=x_shape).astype("float32"), rng.normal(size=y_shape).astype("float32")
    result = K.eval(K.batch_dot(x, y, axes))
    if axes is None:
        expected = np.matmul(x, y)
    elif axes == 1:
        expected = np.sum(x * y, axis=1, keepdims=True)  # Keras 2 keeps a trailing axis for rank 1
    elif axes == (2, 2):
        expected = np.einsum("bij,bkj->bik", x, y)
    else:
        expected = np.einsum("bji,bj->bi", x, y)
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)


def test_graph_mode_functions_say_what_to_use():
    with pytest.raises(KbertError, match="inside a TensorFlow graph.*adversarial_training"):
        K.gradients(None, [])  # eager: nothing to differentiate
    with pytest.raises(KbertError, match="no global learning phase"):
        K.in_train_phase(1.0, 0.0)
    assert K.in_train_phase(1.0, 0.0, training=False) == 0.0


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="Keras 2's K.gradients is TensorFlow's")
def test_gradients_in_a_layer_call_under_predict_are_the_tapes():
    """bert4keras's integrated-gradients layer: K.gradients(output, [input]) inside call(), which
    model.predict runs in a TensorFlow graph, as Keras 2 did."""
    import tensorflow as tf

    class InputGradient(keras.layers.Layer):
        def call(self, inputs):
            hidden, output = inputs
            return K.gradients(K.sum(output), [hidden])[0] * hidden

        def compute_output_shape(self, input_shape):
            return input_shape[0]

    tokens = keras.Input((3,), dtype="int32")
    hidden = keras.layers.Embedding(10, 4)(tokens)
    output = keras.layers.Dense(2, activation="tanh")(keras.layers.Dense(5, activation="gelu")(hidden))
    gradient_model = keras.Model(tokens, InputGradient()([hidden, output]))
    ids = np.array([[1, 2, 3], [4, 5, 6]])
    vectors = tf.Variable(gradient_model.layers[1](ids))
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(gradient_model.layers[3](gradient_model.layers[2](vectors)))
    expected = tape.gradient(total, vectors) * vectors
    np.testing.assert_allclose(gradient_model.predict(ids, verbose=0), expected, rtol=1e-5, atol=1e-7)
    assert np.abs(expected).max() > 1e-3


def test_in_train_phase_follows_the_layer_call_it_runs_in():
    """A bert4keras layer whose call takes no `training` (BERT-of-Theseus's BinaryRandomChoice) still gets fit's
    training phase, as Keras 2's learning phase gave it."""
    class TrainOrTest(keras.layers.Layer):
        def call(self, inputs):
            return K.in_train_phase(inputs + 1.0, inputs)

    inputs = keras.Input((1,))
    model = keras.Model(inputs, TrainOrTest()(inputs))
    model.compile("sgd", "mse")
    x = np.zeros((2, 1), "float32")
    assert model.predict(x, verbose=0).tolist() == [[0.0], [0.0]]
    assert model.evaluate(x, x, verbose=0) == 0.0
    assert model.train_on_batch(x, x) == 1.0  # the training branch: (0 + 1 - 0)²


def test_set_value_and_eval_on_a_variable():
    variable = keras.Variable(np.zeros((2,)), dtype="float32")
    K.set_value(variable, [1.0, 2.0])
    assert K.eval(variable).tolist() == [1.0, 2.0]


# -- backend helpers --

def test_sequence_masking_over_two_axes_and_return_mask():
    scores = np.ones((1, 3, 3), dtype="float32")
    masked, mask = backend.sequence_masking(scores, np.array([[1, 1, 0]]), "-inf", axis=[1, 2], return_mask=True)
    expected = np.where(np.outer([1, 1, 0], [1, 1, 0])[None] > 0, 1.0, -1e12)
    np.testing.assert_array_equal(K.eval(masked), expected.astype("float32"))
    assert K.eval(mask).sum() == 4


def test_sparse_multilabel_crossentropy_equals_the_dense_form():
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(3, 6)).astype("float32")
    positives = np.array([[1, 4], [0, 0], [2, 5]])  # row 2: class 0 alone, listed twice
    dense = np.zeros((3, 6), "float32")
    for row, ids in enumerate(positives):
        dense[row, ids] = 1
    sparse = backend.sparse_multilabel_categorical_crossentropy(positives, scores)
    # a class listed twice counts twice in the sparse form's positive sum: compare rows with distinct ids
    np.testing.assert_allclose(K.eval(sparse)[[0, 2]], K.eval(multilabel_categorical_crossentropy(dense, scores))[[0, 2]],
                               rtol=1e-5)
    masked = backend.sparse_multilabel_categorical_crossentropy(np.array([[0, 3]]), scores[:1], mask_zero=True)
    dense_one = np.zeros((1, 6), "float32")
    dense_one[0, 3] = 1
    scores_without_0 = scores[:1].copy()
    scores_without_0[0, 0] = -1e12  # class 0 is padding: neither positive nor negative
    np.testing.assert_allclose(K.eval(masked), K.eval(multilabel_categorical_crossentropy(dense_one, scores_without_0)),
                               rtol=1e-5)


def test_rotary_and_search_layer_and_get_output_at():
    from kbert.layers import SinusoidalPositionEmbedding
    from kbert.layers.rotary import apply_rotary
    x = np.random.default_rng(2).normal(size=(2, 5, 3, 4)).astype("float32")
    positions = SinusoidalPositionEmbedding(4)(x[..., 0, :])
    np.testing.assert_allclose(K.eval(backend.apply_rotary_position_embeddings(positions, x)),
                               K.eval(apply_rotary(x, positions)))
    inputs = keras.Input((3,))
    shared = keras.layers.Dense(3, name="shared")
    outputs = keras.layers.Dense(2, name="top")(shared(shared(inputs)))
    assert backend.search_layer(outputs, "shared") is shared
    assert backend.search_layer(outputs, "absent") is None
    assert backend.get_output_at(shared, 1) is shared._inbound_nodes[1].output_tensors[0]


def test_piecewise_linear_without_zero():
    assert round(float(backend.piecewise_linear(500, {1000: 1.0, 2000: 0.1})), 6) == 0.5
    assert round(float(backend.piecewise_linear(500, {1000: 1.0, 2000: 0.1}, from_zero=False)), 6) == 1.0


# -- layers --

@keras.saving.register_keras_serializable(package="kbert_tests")
class MaskedCrossEntropy(Loss):
    def compute_loss(self, inputs, mask=None):
        y_true, y_mask, y_pred = inputs
        loss = K.sparse_categorical_crossentropy(y_true, y_pred)
        return K.sum(loss * y_mask) / K.sum(y_mask)  # int ids and mask, as a bert4keras script writes


def _loss_model():
    tokens = keras.Input((None,), dtype="int32")
    segments = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(10, 8)(tokens)
    probabilities = keras.layers.Dense(10, activation="softmax")(hidden)
    output = MaskedCrossEntropy(2)([tokens, segments, probabilities])
    return keras.Model([tokens, segments], output)


def test_loss_layer_trains_a_model_compiled_without_a_loss(tmp_path):
    model = _loss_model()
    model.compile(optimizer=keras.optimizers.Adam(0.05))
    tokens = np.random.default_rng(3).integers(0, 10, size=(16, 5))
    history = model.fit([tokens, np.ones_like(tokens)], None, epochs=5, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert model.predict([tokens[:2], np.ones_like(tokens[:2])], verbose=0).shape == (2, 5, 10)
    path = tmp_path / "loss.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert loaded.layers[-1].get_config()["output_axis"] == 2
    np.testing.assert_allclose(loaded.predict([tokens[:2], np.ones_like(tokens[:2])], verbose=0),
                               model.predict([tokens[:2], np.ones_like(tokens[:2])], verbose=0), rtol=1e-6)


def test_loss_layer_weighs_only_the_masked_positions():
    model = _loss_model()
    tokens = np.array([[1, 2, 3]])
    model([tokens, np.array([[0, 0, 1]])])
    probabilities = model.layers[-2](model.layers[1](tokens))
    expected = -np.log(K.eval(probabilities)[0, 2, 3])
    np.testing.assert_allclose(float(model.losses[0]), expected, rtol=1e-5)


def test_conditional_layer_normalization_starts_as_the_plain_norm():
    x, condition = np.array([[[1.0, 3.0, 5.0]]], "float32"), np.ones((1, 4), "float32")
    plain = LayerNormalization()(x)
    conditional = LayerNormalization(conditional=True, hidden_units=2)([x, condition])
    np.testing.assert_allclose(K.eval(conditional), K.eval(plain), rtol=1e-6)


# -- optimizers --

def _one_step(optimizer, value, gradient, steps=1, name="w"):
    variable = keras.Variable(np.array(value, "float32"), name=name)
    for _ in range(steps):
        optimizer.apply([ops.convert_to_tensor(np.array(gradient, "float32"))], [variable])
    return K.eval(variable)


def test_adam_without_bias_correction():
    corrected = _one_step(optimizers.Adam(0.1), [1.0], [0.5])
    uncorrected = _one_step(optimizers.Adam(0.1, bias_correction=False), [1.0], [0.5])
    # step 1: m = 0.05, v = 0.00025; without correction the step is lr·m/(√v+ε)
    np.testing.assert_allclose(uncorrected, [1.0 - 0.1 * 0.05 / (np.sqrt(0.00025) + 1e-6)], rtol=1e-5)
    np.testing.assert_allclose(corrected, [1.0 - 0.1 * 0.5 / (0.5 + 1e-6)], rtol=1e-5)


def test_weight_decay_skips_excluded_names():
    AdamW = optimizers.extend_with_weight_decay(optimizers.Adam, "AdamW")
    decayed = _one_step(AdamW(0.1, weight_decay_rate=0.5), [1.0], [0.0], name="kernel")
    kept = _one_step(AdamW(0.1, weight_decay_rate=0.5, exclude_from_weight_decay=["bias"]), [1.0], [0.0],
                     name="bias")
    np.testing.assert_allclose(decayed, [1.0 - 0.1 * 0.5], rtol=1e-6)
    np.testing.assert_allclose(kept, [1.0])


def test_parameter_wise_learning_rates_multiply():
    SGD = optimizers.extend_with_parameter_wise_lr(keras.optimizers.SGD)
    result = _one_step(SGD(0.1, paramwise_lr_schedule={"emb": 10.0, "x": 0.5}), [0.0], [1.0], name="embx")
    np.testing.assert_allclose(result, [-0.1 * 10 * 0.5], rtol=1e-6)


def test_lookahead_pulls_back_every_k_steps():
    SGD = optimizers.extend_with_lookahead(keras.optimizers.SGD)
    result = _one_step(SGD(1.0, steps_per_slow_update=2, slow_step_size=0.5), [0.0], [1.0], steps=2)
    np.testing.assert_allclose(result, [-1.0])  # fast: 0 → -2; slow: 0 + 0.5·(-2 - 0)


def test_lazy_optimization_keeps_rows_without_gradient():
    AdamLazy = optimizers.extend_with_lazy_optimization(optimizers.Adam)
    optimizer = AdamLazy(0.1, include_in_lazy_optimization=["table"])
    variable = keras.Variable(np.ones((2, 2), "float32"), name="table")
    optimizer.apply([ops.convert_to_tensor(np.array([[1.0, 1.0], [0.0, 0.0]], "float32"))], [variable])
    optimizer.apply([ops.convert_to_tensor(np.array([[0.0, 0.0], [0.0, 0.0]], "float32"))], [variable])
    values = K.eval(variable)
    assert values[1].tolist() == [1.0, 1.0]  # never touched
    assert np.all(values[0] < 1.0)


def test_layer_adaptation_scales_the_step_to_the_weight_norm():
    SGD = optimizers.extend_with_layer_adaptation(keras.optimizers.SGD)
    result = _one_step(SGD(0.1), [3.0, 4.0], [1.0, 0.0])
    # SGD's step/lr is -g (norm 1); ratio ‖w‖/1 = 5: w - 0.1·5·g
    np.testing.assert_allclose(result, [2.5, 4.0], rtol=1e-6)


def test_ema_apply_and_reset():
    AdamEMA = optimizers.extend_with_exponential_moving_average(keras.optimizers.SGD)
    optimizer = AdamEMA(1.0, ema_momentum=0.5)
    variable = keras.Variable(np.zeros(1, "float32"))
    for _ in range(2):
        optimizer.apply([ops.ones(1)], [variable])
    weights = K.eval(variable).copy()  # -2
    optimizer.apply_ema_weights()
    average = K.eval(variable).copy()  # first step: -1; second: 0.5·-1 + 0.5·-2
    optimizer.reset_old_weights()
    np.testing.assert_allclose(weights, [-2.0])
    np.testing.assert_allclose(average, [-1.5])
    np.testing.assert_allclose(K.eval(variable), weights)


def test_extensions_compose_and_map_onto_keras_options():
    AdamW = optimizers.extend_with_weight_decay(optimizers.Adam, "AdamW")
    AdamWLRGA = optimizers.extend_with_gradient_accumulation(
        optimizers.extend_with_piecewise_linear_lr(AdamW, "AdamWLR"), "AdamWLRGA")
    optimizer = AdamWLRGA(1e-3, weight_decay_rate=0.01, lr_schedule={100: 1}, grad_accum_steps=4)
    assert (type(optimizer).__name__, optimizer.gradient_accumulation_steps, optimizer.weight_decay) == \
        ("AdamWLRGA", 4, 0.01)
    assert round(float(optimizer.learning_rate), 8) == 0.0  # the schedule's warm-up starts at 0
    with pytest.raises(KbertError, match="first moment"):
        optimizers.AdaFactor(beta1=0.9)


# -- snippets --

def test_open_indexable_and_its_index_file(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("一\n二二\n三\n", encoding="utf-8")
    index = tmp_path / "lines.index.json"
    with snippets.open(str(path), encoding="utf-8", indexable=str(index)) as lines:
        assert (len(lines), lines[1], lines[2]) == (3, "二二\n", "三\n")
    assert json.loads(index.read_text()) == [0, 4, 11]
    with snippets.open(str(path), encoding="utf-8", indexable=str(index)) as lines:
        assert lines[0] == "一\n" and list(lines)[-1] == "三\n"


def test_parallel_apply_in_processes_keeps_order_when_asked():
    offset = 3  # a closure: the worker processes inherit it
    assert snippets.parallel_apply(lambda x: x + offset, range(20), 2, 4, unordered=False) == list(range(3, 23))
    collected = []
    snippets.parallel_apply(str, range(5), 2, 2, callback=collected.append, dummy=True)
    assert sorted(collected) == ["0", "1", "2", "3", "4"]


def test_text_utilities():
    assert snippets.strQ2B("ＡＢＣ　１２３！") == "ABC 123!"
    length, mapping = snippets.longest_common_subsequence("abcbdab", "bdcaba")
    assert length == 4 and all("abcbdab"[i] == "bdcaba"[j] for i, j in mapping)
    assert snippets.to_array([1, 2]).tolist() == [1, 2]


# -- adversarial training --

def _tiny_classifier():
    keras.utils.set_random_seed(0)
    tokens = keras.Input((3,), dtype="int32")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(10, 4, name="Embedding-Token")(tokens))
    model = keras.Model(tokens, keras.layers.Dense(2, activation="softmax")(pooled))
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="sparse_categorical_crossentropy")
    return model


def test_fgm_step_is_the_ordinary_step_on_the_perturbed_table():
    import tensorflow as tf
    x, y = np.array([[1, 2, 3], [4, 5, 6]]), np.array([0, 1])
    model, reference = _tiny_classifier(), _tiny_classifier()
    adversarial_training(model, "Embedding-Token", epsilon=0.5)
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, shuffle=False)
    # by hand: g = ∂loss/∂E, E += 0.5·g/‖g‖, an SGD step on every weight, E -= the perturbation
    table = reference.get_layer("Embedding-Token").embeddings
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    with tf.GradientTape() as tape:
        loss = loss_fn(y, reference(x, training=True))
    gradient = tf.convert_to_tensor(tape.gradient(loss, table))
    delta = 0.5 * gradient / (tf.norm(gradient) + 1e-8)
    table.assign_add(delta)
    with tf.GradientTape() as tape:
        loss = loss_fn(y, reference(x, training=True))
    for variable, step in zip(reference.trainable_variables, tape.gradient(loss, reference.trainable_variables)):
        variable.assign_sub(0.5 * tf.convert_to_tensor(step))
    table.assign_sub(delta)
    for mine, theirs in zip(model.weights, reference.weights):
        np.testing.assert_allclose(K.eval(mine), K.eval(theirs), atol=1e-6)


def test_gradient_penalty_adds_half_epsilon_times_the_squared_gradient():
    import tensorflow as tf
    x, y = np.array([[1, 2, 3], [4, 5, 6]]), np.array([0, 1])
    model = _tiny_classifier()
    table = model.get_layer("Embedding-Token").embeddings
    with tf.GradientTape() as tape:
        loss = keras.losses.SparseCategoricalCrossentropy()(y, model(x))
    penalty = float(tf.reduce_sum(tf.square(tf.convert_to_tensor(tape.gradient(loss, table)))))
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="sparse_categorical_crossentropy")
    gradient_penalty(model, "Embedding-Token", epsilon=2.0)
    history = model.fit(x, y, batch_size=2, epochs=1, verbose=0, shuffle=False)
    np.testing.assert_allclose(history.history["loss"][0], float(loss) + penalty, rtol=1e-5)


def test_adversarial_training_names_a_missing_layer():
    model = _tiny_classifier()
    with pytest.raises(KbertError, match="no embedding layer named 'Embedding-Segment'"):
        adversarial_training(model, "Embedding-Segment")


def test_adversarial_training_refuses_a_frozen_table_and_a_loss_scaled_penalty():
    model = _tiny_classifier()
    model.get_layer("Embedding-Token").trainable = False
    with pytest.raises(KbertError, match="'Embedding-Token' is frozen"):
        adversarial_training(model, "Embedding-Token")
    model = _tiny_classifier()
    model.compile(optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)),
                  loss="sparse_categorical_crossentropy")
    with pytest.raises(KbertError, match="LossScaleOptimizer"):
        gradient_penalty(model, "Embedding-Token")


# -- models --

def test_prefix_and_config_keywords_and_graph_hooks_as_bert4keras(tiny_checkpoint_dir, tmp_path):
    """BERT-of-Theseus's build: two prefixed models from one checkpoint, one with fewer layers, and a model
    made of their layers applied to new inputs."""
    from kbert.compat.models import build_transformer_model
    config, checkpoint = str(tiny_checkpoint_dir / "bert_config.json"), str(tiny_checkpoint_dir / "bert_model.ckpt")
    plain = build_transformer_model(config, checkpoint)
    bert = build_transformer_model(config, checkpoint, return_keras_model=False, prefix="Predecessor-")
    short = build_transformer_model(config, checkpoint, return_keras_model=False, prefix="Successor-",
                                    num_hidden_layers=1)
    assert [layer.name for layer in bert.model.layers] == ["Predecessor-" + layer.name for layer in plain.layers]
    assert (short.num_hidden_layers, bert.num_hidden_layers) == (1, 2)
    assert not any(layer.name.startswith("Successor-Transformer-1-") for layer in short.model.layers)
    for mine, theirs in zip(bert.model.weights, plain.weights):
        np.testing.assert_array_equal(K.eval(mine), K.eval(theirs))
    tokens = np.array([[2, 5, 9, 3, 0]])
    x = bert.apply_embeddings(bert.inputs)
    for index in range(bert.num_hidden_layers):
        x = bert.apply_main_layers(x, index)
    again = keras.Model(bert.inputs, x)
    np.testing.assert_allclose(again.predict([tokens, tokens * 0], verbose=0),
                               plain.predict([tokens, tokens * 0], verbose=0), atol=1e-6)
    mixed = keras.Model(bert.inputs, short.apply_main_layers(bert.apply_embeddings(bert.inputs), 0))
    assert len({layer.name for layer in mixed.layers}) == len(mixed.layers)  # the prefixes keep names apart
    bert.save_weights_as_checkpoint(str(tmp_path / "again.ckpt"))
    bert.load_weights_from_checkpoint(str(tmp_path / "again.ckpt"))
    assert bert.model.layers[-1].name.startswith("Predecessor-")
    assert isinstance(bert.initializer, keras.initializers.TruncatedNormal)

def test_load_weights_from_checkpoint_after_building_around_the_backbone(tiny_checkpoint_dir):
    from kbert.compat.models import build_transformer_model
    config = tiny_checkpoint_dir / "bert_config.json"
    loaded = build_transformer_model(str(config), str(tiny_checkpoint_dir / "bert_model.ckpt"))
    bert = build_transformer_model(str(config), return_keras_model=False)
    bert.load_weights_from_checkpoint(str(tiny_checkpoint_dir / "bert_model.ckpt"))
    for mine, theirs in zip(bert.model.weights, loaded.weights):
        np.testing.assert_array_equal(K.eval(mine), K.eval(theirs))


def test_to_dataset_with_bert4keras_types_shapes_and_names():
    """task_iflytek_multigpu: single examples, batched (and padded) by tf.data, keyed by the layers' names."""
    class Examples(snippets.DataGenerator):
        def __iter__(self, random=False):
            for length, label in ((3, 0), (5, 1), (2, 1)):
                yield [[7] * length, [0] * length], [[label]]

    dataset = Examples([0] * 3, batch_size=2).to_dataset(
        types=[("float32", "float32"), ("float32",)], shapes=[([None], [None]), ([1],)],
        names=[("Input-Token", "Input-Segment"), ("Probas",)], padded_batch=True)
    inputs, labels = next(iter(dataset))
    assert sorted(inputs) == ["Input-Segment", "Input-Token"]
    assert keras.ops.convert_to_numpy(inputs["Input-Token"]).tolist() == [[7, 7, 7, 0, 0], [7, 7, 7, 7, 7]]
    assert keras.ops.convert_to_numpy(labels).tolist() == [[0.0], [1.0]]  # a single output's targets stay bare for Keras 3


def test_tokenizer_has_bert4keras_defaults_and_framing():
    from kbert.compat.tokenizers import Tokenizer
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4, "b": 5}
    assert Tokenizer(vocab).encode("A")[0] == [2, 1, 3]  # bert4keras: no lower-casing unless asked
    assert Tokenizer(vocab, do_lower_case=True).encode("A")[0] == [2, 4, 3]
    gpt = Tokenizer(vocab, do_lower_case=True, token_start=None)
    assert gpt.encode("a", "b") == ([4, 3, 5, 3], [0, 0, 1, 1])
    assert gpt.encode("a a a", maxlen=3) == ([4, 4, 3], [0, 0, 0])
    with pytest.raises(KbertError, match="pre_tokenize"):
        Tokenizer(vocab, pre_tokenize=str.split)


def test_t5_encoder_and_decoder_share_the_whole_models_layers():
    from kbert.compat.models import build_transformer_model
    config = shared_path("fixtures", "bert4keras_families", "t5_11_tiny", "config.json")
    t5 = build_transformer_model(str(config), model="t5.1.1", return_keras_model=False)
    source, target = np.array([[5, 6, 7, 1]]), np.array([[0, 9, 10]])
    encoded = t5.encoder.predict(source, verbose=0)
    np.testing.assert_array_equal(t5.decoder.predict([encoded, target], verbose=0),
                                  t5.model.predict([source, target], verbose=0))
    assert [tensor.name for tensor in t5.decoder.inputs] == ["Input-Context", "Decoder-Input-Token"]
    with pytest.raises(KbertError, match="not a whole T5"):
        build_transformer_model(str(REPO / "configs" / "bert_tiny.json"), return_keras_model=False).encoder
