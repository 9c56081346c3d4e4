"""The names a bert4keras script uses, against bert4keras 0.11.5's recorded behaviour."""

import re

import numpy as np
import pytest

import keras
from conftest import CONFIGS, golden, shared_path
from kbert import (DataGenerator, PiecewiseLinear, Tokenizer, build_classifier, build_transformer_model,
                   load_vocab, save_vocab, sequence_padding)


@pytest.fixture(scope="module")
def api():
    return golden("tokenizer_api.json")


@pytest.fixture(scope="module")
def tokenizers():
    vocab = shared_path("vocab", "chinese_vocab.txt")
    return {lower: Tokenizer(vocab, do_lower_case=lower) for lower in (False, True)}


def test_tokenizer_matches_bert4keras(api, tokenizers):
    assert len(api["rows"]) == 18
    for row in api["rows"]:
        tokenizer, text = tokenizers[row["do_lower_case"]], row["text"]
        case = f"{text!r} (do_lower_case={row['do_lower_case']})"
        assert tokenizer.tokenize(text) == row["tokens"], case
        assert tokenizer.encode(text)[0] == row["ids"], case
        assert tokenizer.tokens_to_ids(row["tokens"]) == row["ids"], case
        assert tokenizer.rematch(text, row["tokens"]) == row["rematch"], case
        assert tokenizer.decode(row["ids"]) == row["decode"], case
        pair = row["pair_maxlen32"]
        assert tokenizer.encode(text, pair["second"], maxlen=32) == (pair["token_ids"], pair["segment_ids"]), case


def test_simplified_vocabulary_matches_bert4keras(api, tmp_path):
    expected = api["simplified"]
    token_dict, keep_tokens = load_vocab(shared_path("vocab", "chinese_vocab.txt"), simplified=True,
                                         startswith=["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    assert len(token_dict) == expected["size"] == 13587
    assert keep_tokens[:50] == expected["keep_tokens_head"]
    assert (len(keep_tokens), sum(keep_tokens)) == (expected["keep_tokens_len"], expected["keep_tokens_sum"])
    tokenizer = Tokenizer(token_dict, do_lower_case=True)
    texts = [row["text"] for row in api["rows"][:len(expected["encode"])]]
    assert [tokenizer.encode(text)[0] for text in texts] == expected["encode"]
    save_vocab(tmp_path / "vocab.txt", token_dict)
    assert load_vocab(tmp_path / "vocab.txt") == token_dict


def test_sequence_padding():
    assert sequence_padding([[1, 2, 3], [4]]).tolist() == [[1, 2, 3], [4, 0, 0]]
    assert sequence_padding([[1, 2, 3], [4]], length=2).tolist() == [[1, 2], [4, 0]]
    assert sequence_padding([[1, 2, 3], [4]], length=4, value=-1, mode="pre").tolist() == [[-1, 1, 2, 3],
                                                                                         [-1, -1, -1, 4]]
    matrices = [np.ones((2, 2)), np.ones((1, 1))]  # e.g. GlobalPointer labels: two sequence axes
    assert sequence_padding(matrices, seq_dims=2).tolist() == [[[1, 1], [1, 1]], [[1, 0], [0, 0]]]
    vectors = [np.ones((1, 3)), np.ones((2, 3))]  # a feature axis after the sequence axis
    assert sequence_padding(vectors).shape == (2, 2, 3)
    with pytest.raises(ValueError, match="mode: expected 'post' or 'pre', got 'middle'"):
        sequence_padding([[1]], mode="middle")


def test_piecewise_linear_schedule():
    schedule = PiecewiseLinear(2e-5, {1000: 1, 2000: 0.1})
    values = [float(schedule(step)) for step in (0, 250, 1000, 1500, 2000, 10_000)]
    assert values == pytest.approx([0.0, 5e-6, 2e-5, 1.1e-5, 2e-6, 2e-6])
    flat_start = PiecewiseLinear(1.0, {0: 1, 10: 0.5})
    assert [float(flat_start(step)) for step in (0, 5, 10, 20)] == pytest.approx([1.0, 0.75, 0.5, 0.5])
    restored = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    assert float(restored(1500)) == pytest.approx(1.1e-5)


class SentimentBatches(DataGenerator):
    """The data generator of bert4keras's classification example."""

    def __init__(self, data, tokenizer, batch_size):
        super().__init__(data, batch_size)
        self.tokenizer = tokenizer

    def __iter__(self, random=False):
        token_ids, segment_ids, labels = [], [], []
        for is_end, (text, label) in self.sample(random):
            ids, segments = self.tokenizer.encode(text, maxlen=48)
            token_ids.append(ids)
            segment_ids.append(segments)
            labels.append([label])
            if len(token_ids) == self.batch_size or is_end:
                yield [sequence_padding(token_ids), sequence_padding(segment_ids)], sequence_padding(labels)
                token_ids, segment_ids, labels = [], [], []


@pytest.fixture(scope="module")
def sentiment():
    lines = shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()
    return [(text, int(label)) for text, label in (line.split("\t") for line in lines[:640])]


def test_data_generator_contract(sentiment, tokenizers):
    generator = SentimentBatches(sentiment[:70], tokenizers[True], batch_size=32)
    assert len(generator) == 3
    batches = list(generator)
    assert [len(labels) for _, labels in batches] == [32, 32, 6]
    assert [text for _, (text, _) in generator.sample()] == [text for text, _ in sentiment[:70]]
    ends = [is_end for is_end, _ in generator.sample(random=True)]
    assert ends == [False] * 69 + [True]
    shuffled = [text for _, (text, _) in generator.sample(random=True)]
    assert sorted(shuffled) == sorted(text for text, _ in sentiment[:70]) and shuffled != [t for t, _ in sentiment[:70]]
    endless = iter(generator.forfit())
    assert sum(len(next(endless)[1]) for _ in range(6)) == 140  # two passes
    unlabelled = generator.forfit(random=False)  # bert4keras's VAT example draws batches with next()
    assert [len(next(unlabelled)[1]) for _ in range(4)] == [32, 32, 6, 32]
    (inputs,) = next(iter(generator.fortest()))
    assert len(inputs) == 2 and inputs[0].shape == inputs[1].shape
    # As bert4keras's scripts predict with it: both inputs reach a two-input model.
    from kbert import build_transformer_model

    bert = build_transformer_model(str(CONFIGS / "bert_tiny.json"), with_pool=True)
    assert bert.predict(generator.fortest(), steps=len(generator), verbose=0).shape == (70, 32)
    (tokens, segments), labels = next(iter(generator.to_dataset()))
    assert tokens.dtype == "int64" and labels.shape[1] == 1


def test_forfit_batches_keep_their_sequence_axis_open_and_drop_a_none_target():
    """Keras 3 would fix the length of a generator's batches from its first two (both 3 long here);
    the third is 9 long. A seq2seq script's batches are `[inputs], None`, its loss added by the model."""
    class Batches(DataGenerator):
        def __iter__(self, random=False):
            for length in (3, 3, 9):
                yield [np.ones((2, length), "int32"), np.zeros((2, length), "int32")], None

    class SquareLoss(keras.layers.Layer):  # as bert4keras's Loss layers: the layer adds the loss
        def call(self, x):
            self.add_loss(keras.ops.mean(x ** 2))
            return x

    tokens, segments = keras.Input((None,), dtype="int32"), keras.Input((None,), dtype="int32")
    model = keras.Model([tokens, segments], SquareLoss()(keras.layers.Embedding(4, 2)(tokens)))
    model.compile("sgd")
    history = model.fit(Batches([0] * 6, batch_size=2).forfit(), steps_per_epoch=3, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2
    (first,) = next(iter(Batches([0] * 6, batch_size=2).forfit()))
    assert [tuple(x.shape) for x in first] == [(2, 3), (2, 3)]


def test_a_size_1_axis_of_the_first_batch_stays_open_when_it_is_not_a_label_column():
    """GPLinker's labels are [batch, 2, n, 2], n the most spans of an example: 1 in a first batch, 5 later."""
    class Batches(DataGenerator):
        def __iter__(self, random=False):
            for spans in (1, 5):
                yield np.zeros((2, 4), "int32"), [np.zeros((2, 2, spans, 2)), np.zeros((2, 1))]

    dataset = Batches([0] * 4, batch_size=2).forfit()
    tokens_spec, (spans_spec, column_spec) = dataset.element_spec
    assert spans_spec.shape.as_list() == [None, None, None, None] and column_spec.shape.as_list() == [None, 1]
    batches = iter(dataset)
    assert [tuple(next(batches)[1][0].shape) for _ in range(2)] == [(2, 2, 1, 2), (2, 2, 5, 2)]


@pytest.mark.examples  # a whole run (tens of seconds): CI's example step runs it
def test_classifier_trains_through_forfit(sentiment, tokenizers):
    keras.utils.set_random_seed(0)
    model = build_classifier(build_transformer_model(CONFIGS / "bert_tiny.json"), 2)
    model.compile(keras.optimizers.Adam(PiecewiseLinear(1e-3, {20: 1})), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    generator = SentimentBatches(sentiment, tokenizers[True], batch_size=32)
    history = model.fit(generator.forfit(), steps_per_epoch=len(generator), epochs=3, verbose=0)
    losses = history.history["loss"]
    assert len(losses) == 3 and losses[2] < losses[0], losses


def test_build_transformer_model_keywords(tmp_path):
    from kbert import ConfigError, Transformer
    tiny = CONFIGS / "bert_tiny.json"
    bert = build_transformer_model(config_path=tiny, model="roberta", return_keras_model=False)
    assert isinstance(bert, Transformer) and bert.model.count_params() == 695_360
    assert [t.name for t in bert.inputs] == ["Input-Token", "Input-Segment"] and len(bert.outputs) == 1
    assert type(bert.initializer).__name__ == "TruncatedNormal"
    logits = build_transformer_model(tiny, with_mlm="linear")
    probabilities = build_transformer_model(tiny, with_mlm=True)
    probabilities.set_weights(logits.get_weights())
    tokens = np.array([[101, 6427, 6241, 102]])
    z = logits.predict([tokens, tokens * 0], verbose=0)
    p = probabilities.predict([tokens, tokens * 0], verbose=0)
    np.testing.assert_allclose(p, np.exp(z) / np.exp(z).sum(-1, keepdims=True), rtol=1e-4, atol=1e-7)
    single = build_transformer_model(tiny, segment_vocab_size=0)
    assert [t.name for t in single.inputs] == ["Input-Token"]
    assert "Embedding-Segment" not in [layer.name for layer in single.layers]
    assert single.count_params() == 695_360 - 2 * 32
    with pytest.raises(ConfigError, match=r"model='xlnet': kbert builds bert, roberta, albert"):
        build_transformer_model(tiny, model="xlnet")
    with pytest.raises(ConfigError, match=r"application='decoder': model='bert' builds 'encoder', 'lm', 'unilm'"):
        build_transformer_model(tiny, application="decoder")
    with pytest.raises(TypeError, match="pass the config once"):
        build_transformer_model(tiny, config_path=tiny)


@pytest.mark.examples
def test_ported_bert4keras_script_runs(tmp_path, tiny_checkpoint_dir):
    """docs/examples/sentiment_classification.py: a bert4keras script with only its imports changed."""
    import os
    import shutil
    import subprocess
    import sys
    from conftest import REPO
    from kbert import save_google_checkpoint
    # A "pre-trained" Chinese checkpoint: the tiny config on the real 21,128-token vocabulary.
    bert_dir, data_dir = tmp_path / "bert", tmp_path / "data"
    bert_dir.mkdir(), data_dir.mkdir()
    keras.utils.set_random_seed(1)
    save_google_checkpoint(build_transformer_model(CONFIGS / "bert_tiny.json"), bert_dir / "bert_model.ckpt")
    shutil.copy(CONFIGS / "bert_tiny.json", bert_dir / "bert_config.json")
    shutil.copy(shared_path("vocab", "chinese_vocab.txt"), bert_dir / "vocab.txt")
    for name, count in (("train", 960), ("valid", 200), ("test", 200)):
        lines = shared_path("data", "sentiment", f"sentiment.{name}.data").read_text(encoding="utf-8").splitlines()
        (data_dir / f"sentiment.{name}.data").write_text("\n".join(lines[:count]) + "\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(REPO / "docs" / "examples" / "sentiment_classification.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "BERT_DIR": str(bert_dir), "DATA_DIR": str(data_dir), "EPOCHS": "2", "MAXLEN": "48"})
    assert result.returncode == 0, result.stderr[-3000:]
    # keep_tokens: the embedding holds the 13,587 kept rows of the 21,128, 32 wide.
    assert "434,784" in result.stdout
    assert len(re.findall(r"(?<!best_)val_acc: 0\.\d+", result.stdout)) == 2  # one line per epoch
    final = float(result.stdout.split("final test acc: ")[1].split()[0])
    assert 0.0 <= final <= 1.0 and (tmp_path / "best_model.weights.h5").exists()


def test_batch_offsets_agree_with_rematch(api, tokenizers):
    texts = [row["text"] for row in api["rows"][:9]] + [
        "a\u200bΟΔΟΣ x", "Café\u0301 naïve", "中\u0301文 e\u0301", "  leading\ttabs\u3000and　spaces "]
    lines = shared_path("data", "sentiment", "sentiment.valid.data").read_text(encoding="utf-8").splitlines()
    texts += [line.split("\t")[0] for line in lines[:300]]
    for tokenizer in tokenizers.values():
        for text, spans in zip(texts, tokenizer.offsets(texts)):
            tokens = tokenizer.tokenize(text)[1:-1]
            expected = [(chars[0], chars[-1] + 1) for chars in tokenizer.rematch(text, tokens)]
            assert spans == expected, text


def test_offsets_where_rematch_is_off(tokenizers):
    # bert4keras's rematch lower-cases the whole text before mapping positions, so after a
    # character that lower-cases to two ("İ" -> "i̇") its positions are shifted by one.
    # offsets() counts in the text as given.
    text = "İstanbul 好"
    tokenizer = tokenizers[True]
    tokens = tokenizer.tokenize(text)[1:-1]
    spans = tokenizer.offsets([text])[0]
    assert [text[start:end] for start, end in spans][-1] == "好"
    assert "".join(text[start:end] for start, end in spans[:-1]) == "İstanbul"
    assert tokenizer.rematch(text, tokens)[-1] == [10]  # bert4keras: one past "好" (index 9)


def test_tokenizer_has_bert4keras_private_names(tokenizers):
    """Scripts read `_token_<name>_id` (13 of bert4keras's examples `_token_start_id`) and `_vocab_size`."""
    tokenizer = tokenizers[True]
    vocab = load_vocab(shared_path("vocab", "chinese_vocab.txt"))
    for name, token in (("pad", "[PAD]"), ("unk", "[UNK]"), ("mask", "[MASK]"), ("start", "[CLS]"), ("end", "[SEP]")):
        assert getattr(tokenizer, f"_token_{name}") == token
        assert getattr(tokenizer, f"_token_{name}_id") == vocab[token]
    assert tokenizer._vocab_size == len(vocab) == 21128
    bare = Tokenizer({"[UNK]": 0, "[CLS]": 1, "[SEP]": 2})  # no [PAD] or [MASK]: no ids for them
    assert (bare._token_start_id, hasattr(bare, "_token_mask_id"), bare._vocab_size) == (1, False, 3)


@pytest.mark.parametrize("application", ["lm", "unilm"])
def test_lm_and_unilm_build_the_mlm_head_by_default(application):
    """bert4keras builds it for lm/unilm whatever with_mlm says; kbert unless with_mlm=False."""
    names = {layer.name for layer in build_transformer_model(CONFIGS / "bert_tiny.json", application=application).layers}
    assert {"MLM-Dense", "MLM-Norm", "MLM-Bias", "MLM-Activation"} <= names
    bare = build_transformer_model(CONFIGS / "bert_tiny.json", application=application, with_mlm=False)
    assert not any(layer.name.startswith("MLM-") for layer in bare.layers)
    assert not any(layer.name.startswith("MLM-") for layer in build_transformer_model(CONFIGS / "bert_tiny.json").layers)
