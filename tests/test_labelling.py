"""Sequence-labelling data (tagged files, schemes, spans, scores) and token classifiers."""

import numpy as np
import pytest

import keras
from conftest import CONFIGS, shared_path, write
from kbert import DataError, Tokenizer, build_token_classifier, build_transformer_model
from kbert.layers import viterbi_decode
from kbert.training.losses import global_pointer_crossentropy
from kbert.tasks.labelling import TaggedSentence, detect_scheme, entity_scores, read_tagged, spans, tags_from_spans


def test_real_msra_files():
    sentences, report = read_tagged(shared_path("data", "msra_ner", "msra.dev.bmes"))
    assert len(sentences) == 3000 and str(report).endswith(": 3000 examples")
    assert detect_scheme(sentences) == "BMES"
    assert max(len(sentence.tokens) for sentence in sentences) <= 100
    entities = [span for sentence in sentences for span in spans(sentence.tags)]
    assert {kind for kind, _, _ in entities} == {"PER", "LOC", "ORG"}
    # Well-formed tags come back unchanged from their spans.
    first = sentences[0]
    assert tags_from_spans(len(first.tags), spans(first.tags), "BMES") == list(first.tags)


@pytest.mark.parametrize("scheme, tags", [
    ("BIO", ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC"]),
    ("BIOES", ["B-PER", "E-PER", "O", "S-LOC", "B-LOC", "E-LOC"]),
    ("BMES", ["B-PER", "E-PER", "O", "S-LOC", "B-LOC", "E-LOC"]),
])
def test_spans_in_every_scheme(scheme, tags):
    sentence = TaggedSentence(tuple("张三在北京市"), tuple(tags), 1)
    assert detect_scheme([sentence]) == ("BIOES" if scheme == "BMES" else scheme)
    assert spans(tags) == [("PER", 0, 2), ("LOC", 3, 4), ("LOC", 4, 6)]
    assert tags_from_spans(6, spans(tags), scheme) == tags


def test_ill_formed_tags_follow_conlleval():
    # MSRA has sentences cut inside an entity: they start with M-/E- tags.
    assert spans(["M-PER", "E-PER", "B-PER", "E-PER"]) == [("PER", 0, 2), ("PER", 2, 4)]
    assert spans(["B-LOC", "M-ORG", "E-ORG", "I-PER"]) == [("LOC", 0, 1), ("ORG", 1, 3), ("PER", 3, 4)]
    assert spans(["B-LOC", "M-LOC"]) == [("LOC", 0, 2)]  # runs to the end
    mixed = [TaggedSentence(("张", "三"), ("B-PER", "M-PER"), 1), TaggedSentence(("北", "京"), ("B-LOC", "I-LOC"), 4)]
    with pytest.raises(DataError) as error:
        detect_scheme(mixed, "train.txt")
    assert str(error.value) == ("train.txt, line 5: the tags mix BMES's prefix M- (first on line 2) with BIO's "
                                "prefix I- (first on line 5); use one scheme in the file")


def test_entity_scores_exact_span_and_type():
    truth = [[("PER", 0, 2), ("LOC", 3, 5)], [("ORG", 0, 4)]]
    predicted = [[("PER", 0, 2), ("LOC", 3, 4)], [("ORG", 0, 4), ("PER", 5, 6)]]
    scores = entity_scores(truth, predicted)
    assert scores["PER"] == {"precision": 0.5, "recall": 1.0, "f1": pytest.approx(2 / 3), "support": 1}
    assert scores["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert scores["ORG"]["f1"] == 1.0
    assert scores["overall"] == {"precision": 0.5, "recall": pytest.approx(2 / 3), "f1": pytest.approx(4 / 7),
                                 "support": 3}


@pytest.mark.parametrize("text, line, message", [
    ("张\tB-PER\n三\n", 2, "expected 'token<TAB>tag', found 0 tab(s)"),
    ("张\tB-PER\t1\n", 1, "expected 'token<TAB>tag', found 2 tab(s)"),
    ("好\tO\n\n张\tX-PER\n", 3, "tag 'X-PER' is neither O nor PREFIX-TYPE with a prefix of B, I, M, E, S"),
    ("好\tO\n张\tB-\n", 2, "tag 'B-' is neither O nor PREFIX-TYPE"),
    ("\tO\n", 1, "expected 'token<TAB>tag'"),
])
def test_bad_rows_name_file_and_line(tmp_path, text, line, message):
    path = write(tmp_path, "data.bmes", text)
    with pytest.raises(DataError) as error:
        read_tagged(path)
    assert str(error.value).startswith(f"{path}, line {line}: {message}")


def test_skip_malformed_sentences_and_empty_files(tmp_path):
    path = write(tmp_path, "data.bmes", "好\tO\n\n张\tB-PER\n三\n\n北\tS-LOC\n")
    sentences, report = read_tagged(path, skip_malformed=True)
    assert [s.text for s in sentences] == ["好", "北"] and [s.line for s in sentences] == [1, 6]
    assert report.skipped == [(4, "expected 'token<TAB>tag', found 0 tab(s)")]
    with pytest.raises(DataError, match=r"empty.bmes: no sentences"):
        read_tagged(write(tmp_path, "empty.bmes", "\n\n"))
    with pytest.raises(DataError, match=r"missing.bmes: data file not found"):
        read_tagged(tmp_path / "missing.bmes")


@pytest.fixture(scope="module")
def msra_batch():
    sentences, _ = read_tagged(shared_path("data", "msra_ner", "msra.dev.bmes"))
    tokenizer = Tokenizer(shared_path("vocab", "chinese_vocab.txt"))
    tag_names = ["O"] + [f"{p}-{t}" for t in ("LOC", "ORG", "PER") for p in "BMES"]
    sentences = [s for s in sentences if len(s.tokens) <= 30][:64]
    length = max(len(s.tokens) for s in sentences) + 2
    tokens = np.zeros((len(sentences), length), "int32")
    tags = np.zeros_like(tokens)
    for row, sentence in enumerate(sentences):  # one token per character, as for Chinese
        ids = [tokenizer.cls_id] + tokenizer.tokens_to_ids(list(sentence.tokens)) + [tokenizer.sep_id]
        tokens[row, :len(ids)] = ids
        tags[row, 1:len(ids) - 1] = [tag_names.index(tag) for tag in sentence.tags]
    return tokens, tags, tag_names


def test_crf_token_classifier_fits_padded_batches_and_round_trips(msra_batch, tmp_path):
    tokens, tags, names = msra_batch
    keras.utils.set_random_seed(0)
    tagger = build_token_classifier(build_transformer_model(CONFIGS / "bert_tiny.json"), len(names), head="crf",
                                    crf_lr_multiplier=100)
    crf = tagger.get_layer("CRF")
    tagger.compile(keras.optimizers.Adam(2e-3), loss=crf.sparse_loss, metrics=[crf.sparse_accuracy])
    history = tagger.fit([tokens, np.zeros_like(tokens)], tags, batch_size=16, epochs=4, verbose=0).history
    assert history["loss"][-1] < history["loss"][0]
    paths = keras.ops.convert_to_numpy(viterbi_decode(tagger.predict([tokens, np.zeros_like(tokens)], verbose=0), crf.trans))
    assert not paths[tokens == 0].any()  # 0 at padding
    tagger.save(tmp_path / "tagger.keras")
    restored = keras.models.load_model(tmp_path / "tagger.keras", safe_mode=True, compile=False)
    again = keras.ops.convert_to_numpy(viterbi_decode(restored.predict([tokens, np.zeros_like(tokens)], verbose=0),
                           restored.get_layer("CRF").trans))
    np.testing.assert_array_equal(again, paths)


def test_softmax_and_global_pointer_heads(msra_batch):
    tokens, tags, names = msra_batch
    bert = build_transformer_model(CONFIGS / "bert_tiny.json")
    softmax = build_token_classifier(bert, len(names), head="softmax")
    probabilities = softmax.predict([tokens, np.zeros_like(tokens)], verbose=0)
    assert probabilities.shape == tokens.shape + (len(names),)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    pointer = build_token_classifier(bert, 3, head="global_pointer", head_size=16)
    scores = pointer.predict([tokens, np.zeros_like(tokens)], verbose=0)
    assert scores.shape == (len(tokens), 3, tokens.shape[1], tokens.shape[1])
    assert pointer.get_layer("global_pointer").count_params() == 32 * 3 * 2 * 16 + 3 * 2 * 16
    target = np.zeros(scores.shape, "float32")
    target[:, 0, 1, 2] = 1
    assert np.isfinite(float(global_pointer_crossentropy(target, scores)))
    with pytest.raises(ValueError, match="head: expected one of crf, softmax, global_pointer, got 'pointer'"):
        build_token_classifier(bert, 3, head="pointer")
    with pytest.raises(ValueError, match="needs a backbone whose output is the sequence output"):
        build_token_classifier(build_transformer_model(CONFIGS / "bert_tiny.json", with_pool=True), 3)
