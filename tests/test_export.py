"""`kbert export`: each format loaded in its own runtime gives what Keras gives.

ONNX files run in onnxruntime (float32 within 1e-4 of Keras; int8 smaller
and close), SavedModels in TensorFlow, LiteRT files in the LiteRT
interpreter; a CRF tagger's ONNX emissions decode with the transitions in its
metadata to the tagger's own tags.
"""

import json
import subprocess
import sys

import keras
import numpy as np
import pytest

from conftest import CONFIGS, minilm_dir, shared_path, write_task_data, xlm_roberta_embedder_folder
from kbert.cli.main import main
from kbert.errors import KbertError
from kbert.serving.export import export_model

onnxruntime = pytest.importorskip("onnxruntime", reason="ONNX export: pip install 'kbert[onnx]'")
pytest.importorskip("tf2onnx", reason="ONNX export: pip install 'kbert[onnx]'")
tf = pytest.importorskip("tensorflow", reason="SavedModel and ONNX export go through TensorFlow")
onnx = pytest.importorskip("onnx", reason="ONNX export: pip install 'kbert[onnx]'")
# Each test converts a graph through tf2onnx (10-50 s apiece on two cores, 140 s in all with the trained models they
# share): example runs, which CI runs (--run-examples -m examples); the default suite still exports through the
# server's --runtime onnxruntime and --quantize int8 (test_serve.py) and the embedding models' heads.
pytestmark = pytest.mark.examples

REVIEWS = ["这家酒店很好，下次还来", "房间太小了，隔音也差", "早餐一般", "服务员态度很好，位置方便，推荐"]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("exported")
    write_task_data(root, count=96)
    t5 = root / "t5.json"
    t5.write_text(json.dumps({"vocab_size": 21128, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                              "attention_head_size": 8, "intermediate_size": 64, "hidden_act": ["gelu", "linear"]}))
    common = ["--config", str(CONFIGS / "bert_tiny.json"), "--vocab", str(shared_path("vocab", "chinese_vocab.txt")),
              "--epochs", "1", "--batch-size", "16", "--maxlen", "32"]
    for name, task, data, extra in (("classify", "classify", "reviews.tsv", []),
                                    ("crf", "ner", "tagged.bmes", ["--head", "crf"]),
                                    ("global_pointer", "ner", "tagged.bmes", ["--head", "global_pointer"]),
                                    ("seq2seq", "seq2seq", "pairs.tsv", []),
                                    ("t5", "seq2seq", "pairs.tsv", ["--model", "t5.1.1", "--config", str(t5)])):
        assert main(["train", "--task", task, "--train", str(root / data), "--out", str(root / name),
                     *common, *extra]) == 0
    return root


def encoded(tokenizer, texts):
    from kbert.tokenizers import pad_batch

    tokens, segments = pad_batch([tokenizer.encode(text) for text in texts])
    return tokens.astype(np.int32), segments.astype(np.int32)


def run_onnx(path, tokens, segments):
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    metadata = session.get_modelmeta().custom_metadata_map
    return session.run(None, {"token_ids": tokens, "segment_ids": segments})[0], metadata


def test_a_classifier_in_onnx_float32_and_int8(model_dirs, tmp_path):
    from kbert.tasks.classification import load_classifier

    classifier = load_classifier(str(model_dirs / "classify"))
    tokens, segments = encoded(classifier.tokenizer, REVIEWS)
    expected = np.asarray(classifier.model.predict_on_batch([tokens, segments]))

    report = export_model(str(model_dirs / "classify"), str(tmp_path / "model.onnx"))
    assert report.max_difference <= 1e-4
    probabilities, metadata = run_onnx(tmp_path / "model.onnx", tokens, segments)
    np.testing.assert_allclose(probabilities, expected, atol=1e-4)
    assert json.loads(metadata["kbert_labels"]) == classifier.labels.names and metadata["kbert_task"] == "classify"
    # Each layer norm one node (the embeddings' and two a block), each GELU in the form onnxruntime fuses.
    layers = json.loads((CONFIGS / "bert_tiny.json").read_text())["num_hidden_layers"]
    ops = [node.op_type for node in onnx.load(str(tmp_path / "model.onnx")).graph.node]
    assert ops.count("LayerNormalization") == 2 * layers + 1 and "GlobalAveragePool" not in ops
    assert ops.count("Erf") == layers and "Neg" not in ops

    assert main(["export", "--model", str(model_dirs / "classify"), str(tmp_path / "model.int8.onnx"),
                 "--quantize", "int8"]) == 0
    quantized, _ = run_onnx(tmp_path / "model.int8.onnx", tokens, segments)
    assert (tmp_path / "model.int8.onnx").stat().st_size < 0.35 * (tmp_path / "model.onnx").stat().st_size
    np.testing.assert_allclose(quantized, expected, atol=0.05)  # int8 weights: close, not equal


def test_taggers_in_onnx_and_saved_model(model_dirs, tmp_path):
    from kbert.layers.crf import viterbi_decode
    from kbert.tasks.ner import load_tagger

    for head in ("crf", "global_pointer"):
        tagger = load_tagger(str(model_dirs / head))
        tokens, segments = encoded(tagger.encoder.tokenizer, ["张三去北京大学看望李四", "国务院总理李鹏在北京会见了日本客人"])
        expected = keras.ops.convert_to_numpy(tagger.decode(tokens, segments))
        export_model(str(model_dirs / head), str(tmp_path / f"{head}.onnx"))
        got, metadata = run_onnx(tmp_path / f"{head}.onnx", tokens, segments)
        if head == "crf":  # the emissions, decoded with the transitions the file carries
            assert metadata["kbert_output"] == "emissions" and "Viterbi" in metadata["kbert_decoding"]
            outside = [json.loads(metadata["kbert_labels"]).index("O")]
            got = keras.ops.convert_to_numpy(viterbi_decode(
                got, np.array(json.loads(metadata["kbert_transitions"]), dtype=np.float32),
                starts=outside, ends=outside))
        np.testing.assert_array_equal(got, expected)

        export_model(str(model_dirs / head), str(tmp_path / f"{head}-saved"))
        serving = tf.saved_model.load(str(tmp_path / f"{head}-saved")).signatures["serving_default"]
        output = "tags" if head == "crf" else "entity_hits"
        served = serving(token_ids=tf.constant(tokens), segment_ids=tf.constant(segments))[output]
        np.testing.assert_array_equal(served.numpy(), expected)
        assert json.loads((tmp_path / f"{head}-saved" / "labels.json").read_text(encoding="utf-8")) == \
            tagger.labels.names


@pytest.mark.examples
def test_litert_files_for_a_classifier_and_taggers(model_dirs, tmp_path):
    """Every head gives what Keras gives in the LiteRT interpreter; a CRF's emissions decode with the transitions
    of the metadata beside the file to the tagger's tags."""
    from kbert.layers.crf import viterbi_decode
    from kbert.serving.export import litert_runner, metadata_path
    from kbert.tasks.classification import load_classifier
    from kbert.tasks.ner import load_tagger

    classifier = load_classifier(str(model_dirs / "classify"))
    tokens, segments = encoded(classifier.tokenizer, REVIEWS)
    assert main(["export", "--model", str(model_dirs / "classify"), str(tmp_path / "classify.tflite")]) == 0
    np.testing.assert_allclose(litert_runner(str(tmp_path / "classify.tflite"))(tokens, segments),
                               classifier.model.predict_on_batch([tokens, segments]), atol=1e-4)
    report = export_model(str(model_dirs / "classify"), str(tmp_path / "classify.int8.tflite"), quantize="int8")
    assert report.quantized == "int8" and report.max_difference < 0.05
    assert (tmp_path / "classify.int8.tflite").stat().st_size < 0.35 * (tmp_path / "classify.tflite").stat().st_size
    np.testing.assert_allclose(litert_runner(str(tmp_path / "classify.int8.tflite"))(tokens, segments),
                               classifier.model.predict_on_batch([tokens, segments]), atol=0.05)
    metadata = json.loads((tmp_path / "classify.metadata.json").read_text("utf-8"))
    assert {key: metadata[key] for key in ("kbert_task", "kbert_output", "kbert_labels", "kbert_maxlen")} == {
        "kbert_task": "classify", "kbert_output": "probabilities", "kbert_labels": classifier.labels.names,
        "kbert_maxlen": 32}
    for head in ("crf", "global_pointer"):
        tagger = load_tagger(str(model_dirs / head))
        tokens, segments = encoded(tagger.encoder.tokenizer, ["张三去北京大学看望李四", "国务院总理李鹏在北京会见了日本客人"])
        report = export_model(str(model_dirs / head), str(tmp_path / f"{head}.tflite"))
        assert "LiteRT interpreter" in str(report)
        got = litert_runner(str(tmp_path / f"{head}.tflite"))(tokens, segments)
        metadata = json.loads(open(metadata_path(str(tmp_path / f"{head}.tflite")), encoding="utf-8").read())
        assert metadata["kbert_labels"] == tagger.labels.names
        if head == "crf":
            assert metadata["kbert_output"] == "emissions" and "Viterbi" in metadata["kbert_decoding"]
            outside = [metadata["kbert_labels"].index("O")]
            got = keras.ops.convert_to_numpy(viterbi_decode(
                got, np.array(metadata["kbert_transitions"], dtype=np.float32), starts=outside, ends=outside))
        np.testing.assert_array_equal(got, keras.ops.convert_to_numpy(tagger.decode(tokens, segments)))


@pytest.mark.examples
def test_a_seq2seq_model_in_onnx_decodes_as_kbert_generate(model_dirs, tmp_path):
    """The cached step as one ONNX graph: OnnxGenerator's greedy loop on it (NumPy and onnxruntime only)
    gives kbert.generate's tokens, on other sources and for longer than the export's own check."""
    from kbert.generation import generate
    from kbert.serving.generator_export import OnnxGenerator
    from kbert.tasks.seq2seq import load_generator

    loaded = load_generator(str(model_dirs / "seq2seq"))
    report = export_model(str(model_dirs / "seq2seq"), str(tmp_path / "generator.onnx"))
    assert report.max_difference < 1e-4
    generator = OnnxGenerator(str(tmp_path / "generator.onnx"))
    assert (generator.application, generator.calls, generator.end_id) == ("unilm", 2, loaded.tokenizer.sep_id)
    prompts = [ids for ids, _ in loaded.tokenizer.encode_all(["张三去北京大学看望李四", "好", "房间太小了，隔音也差"])]
    wanted = generate(loaded.model, prompts, max_new_tokens=20, end_id=generator.end_id, strategy="greedy")
    assert generator.greedy(prompts, max_new_tokens=20) == wanted
    assert max(map(len, wanted)) > 1  # more than one step was compared
    beams = generate(loaded.model, prompts, max_new_tokens=12, end_id=generator.end_id, strategy="beam", beam_size=3)
    assert generator.beam(prompts, max_new_tokens=12, beam_size=3) == beams
    export_model(str(model_dirs / "seq2seq"), str(tmp_path / "generator.int8.onnx"), quantize="int8")
    int8 = OnnxGenerator(str(tmp_path / "generator.int8.onnx"))
    assert np.allclose(int8.first_probabilities(prompts).sum(-1), 1.0, atol=1e-3)
    assert (tmp_path / "generator.int8.onnx").stat().st_size < 0.5 * (tmp_path / "generator.onnx").stat().st_size
    export_model(str(model_dirs / "classify"), str(tmp_path / "classifier.onnx"))
    with pytest.raises(KbertError, match="not a kbert seq2seq export"):
        OnnxGenerator(str(tmp_path / "classifier.onnx"))


@pytest.mark.examples
def test_a_t5_in_onnx_is_its_encoder_and_its_step_and_decodes_as_kbert_generate(model_dirs, tmp_path):
    """A T5: NAME.encoder.onnx beside the step NAME.onnx; OnnxGenerator encodes each source once and decodes
    from the start id, giving kbert.generate's tokens; an existing encoder file is never replaced."""
    from kbert.generation import generate
    from kbert.serving.generator_export import OnnxGenerator
    from kbert.tasks.seq2seq import decoder_start_id, load_generator

    loaded = load_generator(str(model_dirs / "t5"))
    report = export_model(str(model_dirs / "t5"), str(tmp_path / "t5.onnx"))
    assert report.max_difference < 1e-4 and report.companion == str(tmp_path / "t5.encoder.onnx")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["t5.encoder.onnx", "t5.onnx"]
    generator = OnnxGenerator(str(tmp_path / "t5.onnx"))
    start = decoder_start_id(loaded.tokenizer)
    assert (generator.application, generator.start_id, generator.hide_start) == ("t5", start, False)
    prompts = [ids for ids, _ in loaded.tokenizer.encode_all(["张三去北京大学看望李四", "好", "房间太小了，隔音也差"])]
    wanted = generate(loaded.model, prompts, max_new_tokens=12, end_id=generator.end_id, start_id=start)
    assert generator.greedy(prompts, max_new_tokens=12) == wanted
    beams = generate(loaded.model, prompts, max_new_tokens=12, end_id=generator.end_id, start_id=start,
                     strategy="beam", beam_size=3)
    assert generator.beam(prompts, max_new_tokens=12, beam_size=3) == beams
    (tmp_path / "again.encoder.onnx").write_text("mine")
    with pytest.raises(KbertError, match="again.encoder.onnx: already exists"):
        export_model(str(model_dirs / "t5"), str(tmp_path / "again.onnx"))
    assert (tmp_path / "again.encoder.onnx").read_text() == "mine" and not (tmp_path / "again.onnx").exists()


def test_the_onnx_generator_imports_neither_keras_nor_tensorflow():
    """OnnxGenerator and its search (`kbert.generation.search`) run on NumPy and onnxruntime alone."""
    import subprocess
    import sys

    code = ("import sys; import kbert.serving.generator_export, kbert.generation.search; "
            "print(sorted({'keras', 'tensorflow', 'jax', 'torch'} & set(sys.modules)))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


@pytest.mark.parametrize("arguments, message", [
    (["seq2seq", "out.tflite"], "a seq2seq model exports as ONNX (its cached decoding step"),
    (["classify", "out", "--quantize", "int8"], "export with --format onnx or litert"),
    (["classify", "exists.onnx"], "already exists"),
    (["classify", "exists.tflite"], "exists.metadata.json: already exists; choose a new path (an export never "
                                    "replaces a file, nor one of the files it writes beside it)"),
    (["classify", "out.onnx", "--format", "keras"],
     "out.onnx: --format keras writes a .keras file: name it NAME.keras"),
    (["classify", "out.tflite", "--format", "onnx"],
     "out.tflite: --format onnx writes a .onnx file: name it NAME.onnx"),
    (["classify", "out.onnx", "--format", "saved_model"], "--format saved_model writes a SavedModel directory"),
])
def test_exports_refused_with_the_reason(model_dirs, tmp_path, capsys, arguments, message):
    (tmp_path / "exists.onnx").write_text("mine")
    (tmp_path / "exists.metadata.json").write_text("mine")
    model, out, *rest = arguments
    assert main(["export", "--model", str(model_dirs / model), str(tmp_path / out), *rest]) == 2
    assert message in capsys.readouterr().err
    assert (tmp_path / "exists.onnx").read_text() == "mine" and (tmp_path / "exists.metadata.json").read_text() == "mine"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["exists.metadata.json", "exists.onnx"]  # no more
    with pytest.raises(KbertError, match="expected int8"):
        export_model(str(model_dirs / "classify"), str(tmp_path / "x.onnx"), quantize="int4")


def test_onnx_metadata_says_how_to_make_the_input(model_dirs, tmp_path):
    from kbert.tasks.classification import load_classifier

    assert main(["export", "--model", str(model_dirs / "classify"), str(tmp_path / "model.onnx")]) == 0
    tokens, segments = encoded(load_classifier(str(model_dirs / "classify")).tokenizer, REVIEWS)
    _, metadata = run_onnx(tmp_path / "model.onnx", tokens, segments)
    assert json.loads(metadata["kbert_maxlen"]) == 32 and json.loads(metadata["kbert_do_lower_case"]) is True
    config = json.loads((model_dirs / "classify" / "bert_config.json").read_text())
    assert json.loads(metadata["kbert_max_positions"]) == config["max_position_embeddings"]


def test_a_check_that_meets_nan_or_a_changed_label_keeps_nothing(model_dirs, monkeypatch, tmp_path):
    """NaN compares false with any tolerance: it is refused as such; an int8 file must keep every top label."""
    from kbert.serving import export

    real = export.onnx_runner
    for broken, quantize, message in (
            (lambda run: (lambda *ids: run(*ids) * np.nan), None, "hold NaN or infinite values"),
            (lambda run: (lambda *ids: run(*ids)[:, ::-1]), "int8", r"top labels \[.*\] against \[.*\] \(allowed: "
                                                                   r"the same labels, 0.1 apart\)")):
        monkeypatch.setattr(export, "onnx_runner", lambda path, broken=broken: broken(real(path)))
        with pytest.raises(KbertError, match=message):
            export_model(str(model_dirs / "classify"), str(tmp_path / "model.onnx"), quantize=quantize)
        assert list(tmp_path.iterdir()) == []


def test_a_graph_export_on_another_backend_says_which_backend_it_needs(model_dirs, monkeypatch, tmp_path,
                                                                        capsys):
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    for name in ("model.onnx", "model.tflite", "saved"):
        with pytest.raises(KbertError, match=r"traces the model as a TensorFlow graph, and Keras runs on jax here: "
                                             r"run it with KERAS_BACKEND=tensorflow .*, or --format keras"):
            export_model(str(model_dirs / "classify"), str(tmp_path / name))
    texts = tmp_path / "texts.txt"
    texts.write_text("一段话\n", encoding="utf-8")
    assert main(["embed", "--model", str(minilm_dir()), str(texts), "--runtime", "onnxruntime"]) == 2
    assert "--runtime onnxruntime traces the model as a TensorFlow graph, and Keras runs on jax here" in \
        capsys.readouterr().err


def test_sigterm_during_an_export_leaves_no_staging_behind(model_dirs, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    scratch, out = tmp_path / "tmp", tmp_path / "out"
    scratch.mkdir()
    out.mkdir()
    process = subprocess.Popen([sys.executable, "-m", "kbert", "export", "--model", str(model_dirs / "classify"),
                                str(out / "model.onnx")], env={**os.environ, "TMPDIR": str(scratch)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list(scratch.glob("kbert-export-*")) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)  # until the export is staging its files
    assert list(scratch.glob("kbert-export-*")), "the export never staged anything"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 128 + signal.SIGTERM, process.stderr.read().decode()[-2000:]
    assert list(out.iterdir()) == [] and list(scratch.glob("kbert-export-*")) == []


SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
             "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
             "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums."]


def test_an_embedding_model_in_onnx_keeps_its_pooling_projection_and_normalisation(tmp_path):
    """A small XLM-R sentence-transformers model (max and weighted-mean pooling side by side, a Tanh projection,
    Normalize; padded with the negative id of its <pad>, -2, which the metadata names): the ONNX file's vectors
    are Embedder.encode's. The export runs in a process of its own, as a user runs
    it: tf2onnx's conversions keep memory a long-lived test worker would carry on. (The real all-MiniLM-L6-v2
    goes through ONNX in the `kbert embed --quantize int8` test below.)"""
    from kbert.embeddings.folders import write_modules
    from kbert.embeddings.modules import Dense
    from kbert.embeddings.embedder import Embedder
    from kbert.tokenizers import pad_batch

    folder = xlm_roberta_embedder_folder(tmp_path / "xlmr", SENTENCES)
    rng = np.random.default_rng(2)
    projection = [rng.normal(scale=0.3, size=(64, 24)).astype(np.float32), rng.normal(size=24).astype(np.float32)]
    write_modules(str(folder), "max+weightedmean", 32, [Dense(projection, "tanh")], True, 64)
    result = subprocess.run([sys.executable, "-m", "kbert", "export", "--model", str(folder),
                             str(tmp_path / "xlmr.onnx")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    embedder = Embedder.load(folder)
    session = onnxruntime.InferenceSession(str(tmp_path / "xlmr.onnx"), providers=["CPUExecutionProvider"])
    metadata = session.get_modelmeta().custom_metadata_map
    assert json.loads(metadata["kbert_pad_id"]) == embedder.tokenizer.pad_id == -2  # -1 - <pad>
    token_ids, segment_ids = pad_batch([embedder.tokenizer.encode(sentence) for sentence in SENTENCES],
                                       pad_id=json.loads(metadata["kbert_pad_id"]))
    assert metadata["kbert_task"] == "embed" and metadata["kbert_pooling"] == "max+weightedmean"
    assert json.loads(metadata["kbert_normalized"]) is True and json.loads(metadata["kbert_dimensions"]) == 24
    vectors = session.run(None, {"token_ids": token_ids, "segment_ids": segment_ids})[0]
    np.testing.assert_allclose(vectors, embedder.encode(SENTENCES), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)


def _onnx_ops_and_outputs(function, x, staging):
    """`function` of one float32 tensor exported as `kbert export` converts it: its node types, and its outputs
    on `x` in onnxruntime."""
    from kbert.serving.conversion import convert_to_onnx

    signature = [tf.TensorSpec(x.shape, tf.float32, name="x")]
    staging.mkdir()
    path = convert_to_onnx(tf.function(function, input_signature=signature), signature, {}, str(staging), None, "test")
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return [node.op_type for node in onnx.load(path).graph.node], session.run(None, {"x": x})


def test_layer_norms_and_gelus_rewritten_for_onnxruntime_compute_the_same(tmp_path):
    """Keras's layer norm and exact GELU, as tf2onnx writes them, become one `LayerNormalization` and the GELU
    form onnxruntime fuses, computing what TensorFlow does; a layer norm whose mean is read elsewhere is kept."""
    norm = keras.layers.LayerNormalization(epsilon=1e-12, gamma_initializer="random_normal",
                                           beta_initializer="random_normal")
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype(np.float32) * 3
    block = lambda x: norm(keras.activations.gelu(x, approximate=False))  # noqa: E731
    ops, outputs = _onnx_ops_and_outputs(block, x, tmp_path / "block")
    assert ops.count("LayerNormalization") == 1 and "GlobalAveragePool" not in ops and "Neg" not in ops
    assert ops.count("Erf") == 1 and ops[ops.index("Erf") - 1] == "Div"
    np.testing.assert_allclose(outputs[0], np.asarray(block(x)), atol=1e-5)

    def norm_and_its_mean(x):  # as Keras's layer norm computes it on TensorFlow
        mean, variance = keras.ops.moments(x, axes=[-1], keepdims=True)
        scale = keras.ops.rsqrt(variance + 1e-6) * norm.gamma
        return x * scale + (-mean * scale + norm.beta), mean

    ops, _ = _onnx_ops_and_outputs(lambda x: norm_and_its_mean(x)[0], x, tmp_path / "norm")
    assert "LayerNormalization" in ops  # the same layer norm, alone, is rewritten
    ops, outputs = _onnx_ops_and_outputs(norm_and_its_mean, x, tmp_path / "norm_and_mean")
    assert "LayerNormalization" not in ops and "GlobalAveragePool" in ops  # its mean is an output too: kept
    for got, want in zip(outputs, norm_and_its_mean(x)):
        np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


@pytest.mark.examples
def test_kbert_embed_in_int8_through_onnxruntime_stays_close_to_kerass_vectors(tmp_path, capsys):
    """`kbert embed --quantize int8`: the vectors of the model's export with int8 weights in onnxruntime (the file
    `kbert serve --quantize int8` serves), close to Keras's float32 ones (in a process of its own, as a user runs
    it); beside a precision other than float32 it is refused."""
    from kbert.embeddings.embedder import Embedder

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    out = tmp_path / "vectors.npy"
    result = subprocess.run([sys.executable, "-m", "kbert", "embed", "--model", str(minilm_dir()), str(texts),
                             "--quantize", "int8", "--npy", str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    quantized, expected = np.load(out), Embedder.load(minilm_dir()).encode(SENTENCES)
    np.testing.assert_allclose(np.linalg.norm(quantized, axis=1), 1, atol=1e-5)  # normalised in the graph
    cosines = np.sum(quantized * expected, 1)
    assert 0.99 <= cosines.min() < 1 - 1e-6  # English sentences: 0.993-0.995 measured; int8 is not float32
    assert main(["embed", "--model", str(minilm_dir()), str(texts), "--quantize", "int8", "--dtype", "bfloat16"]) == 2
    assert "--quantize int8 with --dtype bfloat16: the ONNX file is made from the float32 model" in \
        capsys.readouterr().err
