"""Causal-LM rerankers as sentence-transformers 6 reads them (Qwen3-Reranker's form): a CrossEncoder folder of a
text-generation `Transformer` and a `LogitScore` (the LM's logit of "yes" minus that of "no" at the last token),
each (query, document) pair rendered by the folder's chat template (roles query and document) or, without one,
by the tokenizer's pair encoding. Against `CrossEncoder.predict` on random Qwen3 and Gemma 3 models that
transformers builds (the parity venv): `Reranker`, `kbert predict`, `kbert evaluate`, `/rerank` and `/v1/rerank`."""

import json

import numpy as np
import pytest

from test_decoders import FAMILIES, V

END, START, STOP = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
YES, NO = V - 6, V - 5
# Qwen3-Reranker's shape of template: a system line, the instruction (the prompt, as a system message), the query
# and the document, then the assistant's turn, whose next token the score reads.
TEMPLATE = (f"{START} w1 w2 "
            "{% for m in messages %}{% if m['role'] == 'system' %}w3 {{ m['content'] }} {% endif %}{% endfor %}"
            "{% for m in messages %}{% if m['role'] == 'query' %}w4 {{ m['content'] }} "
            "{% elif m['role'] == 'document' %}w5 {{ m['content'] }} {% endif %}{% endfor %}"
            f"{STOP} {START} w6")
QUERIES = ["w7 w8", "w12", "w20 w21 w22 w23", "w7 w8"]
PASSAGES = ["w9 w10 w11", "w13", "w24", "w30 w31 w32 w33 w34 w35 w36 w37 w38 w39 w40 w41"]


def cross_encoder_folder(tmp_path, family="qwen3", template=True, longest=64, classifier=False, side="left",
                         tied=True):
    """A random causal LM (seed 0) saved by sentence-transformers as a CrossEncoder: a word-level tokenizer with
    yes and no, `<|endoftext|>` its pad token, Qwen's chat markers; the chat template above (or none: the pair
    encoding `$A <|im_end|> $B <|im_end|>`); `longest` its tokenizer's model_max_length. `classifier`: the
    family's `...ForSequenceClassification` with one label instead, which sentence-transformers saves as a plain
    CrossEncoder (no template), padded on `side`. `tied` False: the LM head its own matrix (`lm_head`)."""
    torch = pytest.importorskip("torch", reason="the parity extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the parity extra is not installed")
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="the parity extra is not installed")
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors

    specials = {END: V - 3, START: V - 2, STOP: V - 1}
    vocab = {**{f"w{index}": index for index in range(V - 6)}, "yes": YES, "no": NO, "w_unused": V - 4, **specials}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens([AddedToken(token, special=True) for token in specials])
    template = template and not classifier
    if not template:
        backend.post_processor = processors.TemplateProcessing(
            single=f"$A {STOP}", pair=f"$A {STOP} $B {STOP}", special_tokens=[(STOP, V - 1)])
    raw = tmp_path / f"{family}-raw"
    raw.mkdir()
    backend.save(str(raw / "tokenizer.json"))
    (raw / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": STOP, "pad_token": END, "padding_side": side,
        "model_max_length": longest, **({"chat_template": TEMPLATE} if template else {})}))
    config = {**FAMILIES[f"{family}_tied" if tied else family], "eos_token_id": V - 1, "pad_token_id": V - 3}
    if family == "gemma3":  # a full block, so that the last token reads the whole pair; no soft-capping
        config = {**config, "layer_types": ["sliding_attention", "full_attention"], "final_logit_softcapping": None}
    torch.manual_seed(0)
    head = "ForSequenceClassification" if classifier else "ForCausalLM"
    model = getattr(transformers, ("Gemma3Text" if classifier else "Gemma3") + head if family == "gemma3"
                    else "Qwen3" + head)(transformers.AutoConfig.for_model(
                        **config, **({"num_labels": 1} if classifier else {})))
    model.eval().save_pretrained(raw)
    folder = tmp_path / f"{family}-ce"
    sentence_transformers.CrossEncoder(str(raw), device="cpu").save(str(folder))
    return folder


def write_judged_pairs(path) -> None:
    """24 pairs of random words, labelled 1 and 0 in turn."""
    rng = np.random.default_rng(0)
    rows = [" ".join(f"w{index}" for index in rng.integers(7, 50, rng.integers(2, 7))) for _ in range(24)]
    path.write_text("".join(f"{a}\t{b}\t{index % 2}\n" for index, (a, b) in enumerate(zip(rows, rows[1:] + rows[:1]))))


def reference_logits(folder, queries=QUERIES, passages=PASSAGES, **kwargs):
    import sentence_transformers
    import torch

    model = sentence_transformers.CrossEncoder(str(folder), device="cpu", **kwargs)
    return model.predict(list(zip(queries, passages)), activation_fn=torch.nn.Identity())


@pytest.mark.parametrize("family, template", [("qwen3", True), ("qwen3", False), ("gemma3", True)])
@pytest.mark.parity
def test_a_causal_cross_encoder_scores_as_sentence_transformers(tmp_path, family, template):
    """Each pair's logit (yes − no at its last real token) and score (the folder's Sigmoid) within 1e-4 of
    sentence-transformers', a pair's the same alone as in the padded batch, its prompt as a system message."""
    from kbert.tasks.reranking import Reranker

    folder = cross_encoder_folder(tmp_path, family, template)
    reranker = Reranker.load(folder)
    logits = reranker.logits(QUERIES, PASSAGES)
    np.testing.assert_allclose(logits, reference_logits(folder), atol=1e-4)
    np.testing.assert_allclose([reranker.logits([q], [p])[0] for q, p in zip(QUERIES, PASSAGES)], logits, atol=1e-5)
    np.testing.assert_allclose(reranker.scores(logits), 1 / (1 + np.exp(-reference_logits(folder))), atol=1e-5)
    settings = json.loads((folder / "config_sentence_transformers.json").read_text())
    settings.update(prompts={"web": "w50 w51"}, default_prompt_name="web")
    (folder / "config_sentence_transformers.json").write_text(json.dumps(settings))
    prompted = Reranker.load(folder).logits(QUERIES, PASSAGES)
    np.testing.assert_allclose(prompted, reference_logits(folder), atol=1e-4)
    assert np.abs(prompted - logits).max() > 1e-3


@pytest.mark.parametrize("family, side", [("qwen3", "left"), ("qwen3", "right"), ("gemma3", "right")])
@pytest.mark.parity
def test_a_decoder_sequence_classifier_scores_as_sentence_transformers(tmp_path, family, side):
    """Qwen3's and Gemma 3's `...ForSequenceClassification` with one label (a reranker converted to a classifier:
    the last real token's `score`), padded on either side: each pair's logit within 1e-4 of `CrossEncoder.predict`,
    the same alone as in the padded batch; `kbert predict` prints them as scores."""
    from kbert.tasks.reranking import Reranker

    folder = cross_encoder_folder(tmp_path, family, classifier=True, side=side)
    reranker = Reranker.load(folder)
    logits = reranker.logits(QUERIES, PASSAGES)
    np.testing.assert_allclose(logits, reference_logits(folder), atol=1e-4)
    np.testing.assert_allclose([reranker.logits([q], [p])[0] for q, p in zip(QUERIES, PASSAGES)], logits, atol=1e-5)
    assert np.ptp(logits) > 1e-2  # the pairs differ: the pooled token is each pair's own


@pytest.mark.parity
def test_training_a_decoder_sequence_classifier_writes_what_sentence_transformers_reads(tmp_path):
    """`kbert train --task rerank --checkpoint` on a Qwen3 folder without a LogitScore trains the last token's
    `score` and writes `Qwen3ForSequenceClassification` (its pad id, which transformers' pooling reads), which
    sentence-transformers scores as kbert does (within 1e-4)."""
    from kbert.cli.main import main
    from kbert.tasks.reranking import Reranker

    folder = cross_encoder_folder(tmp_path, classifier=True)
    write_judged_pairs(tmp_path / "pairs.tsv")
    out = tmp_path / "trained"
    assert main(["train", "--task", "rerank", "--checkpoint", str(folder), "--train", str(tmp_path / "pairs.tsv"),
                 "--out", str(out), "--epochs", "1", "--batch-size", "8", "--maxlen", "32"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForSequenceClassification"] and config["pad_token_id"] == V - 3
    np.testing.assert_allclose(Reranker.load(out).logits(QUERIES, PASSAGES), reference_logits(out), atol=1e-4)


@pytest.mark.parity
def test_a_sequence_classifier_kbert_does_not_build_is_refused_by_name(tmp_path):
    """GPT-2's `GPT2ForSequenceClassification` (no head kbert builds for it): an error naming the file and the
    families it builds, before anything is built."""
    transformers = pytest.importorskip("transformers", reason="the parity extra is not installed")
    from kbert.errors import KbertError
    from kbert.tasks.reranking import Reranker

    folder = cross_encoder_folder(tmp_path, classifier=True)
    transformers.GPT2ForSequenceClassification(transformers.GPT2Config(
        vocab_size=V, n_embd=16, n_layer=1, n_head=2, n_positions=32, num_labels=1, pad_token_id=0)).save_pretrained(
        tmp_path / "gpt2")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / "gpt2" / name).write_bytes((folder / name).read_bytes())
    with pytest.raises(KbertError, match=r"gpt2/config.json: a sequence classifier of model_type gpt2 \(kbert builds "
                                         r"the sequence classifiers of bert, .*qwen3"):
        Reranker.load(tmp_path / "gpt2")


@pytest.mark.parity
def test_a_pair_cut_to_the_longest_input_keeps_the_templates_tail(tmp_path):
    """A pair longer than model_max_length (16) is cut, and the template's tail (`<|im_end|> <|im_start|> w6`,
    what the score reads after) written over its last tokens, as sentence-transformers does."""
    from kbert.tasks.reranking import Reranker

    folder = cross_encoder_folder(tmp_path, longest=16)
    reranker = Reranker.load(folder)
    encoded = reranker.tokenizer.encode_all(QUERIES, PASSAGES, maxlen=reranker.maxlen)
    assert [len(ids) for ids, _ in encoded] == [13, 10, 13, 16] and encoded[3][0][-3:] == [V - 1, V - 2, 6]
    np.testing.assert_allclose(reranker.logits(QUERIES, PASSAGES), reference_logits(folder), atol=1e-4)


@pytest.mark.parity
def test_kbert_predict_evaluate_and_serve_a_causal_reranker(tmp_path, capsys):
    """`kbert predict` prints the folder's scores; `kbert evaluate` ranks each query's passages by them; `/rerank`
    and `/v1/rerank` answer them, best first."""
    from starlette.testclient import TestClient

    from kbert.cli.main import main
    from kbert.serving import ServerLimits, create_app
    from kbert.tasks.predictors import PredictionSettings, reranker_predictor
    from kbert.tasks.reranking import Reranker

    folder = cross_encoder_folder(tmp_path)
    scores = Reranker.load(folder).score(QUERIES[0], PASSAGES)
    lines = tmp_path / "pairs.tsv"
    lines.write_text("".join(f"{QUERIES[0]}\t{passage}\n" for passage in PASSAGES))
    capsys.readouterr()
    assert main(["predict", "--model", str(folder), str(lines)]) == 0
    assert capsys.readouterr().out.split() == [f"{score:.4f}" for score in scores]
    judged = tmp_path / "judged.tsv"
    judged.write_text("".join(f"{QUERIES[0]}\t{passage}\t{int(index == 2)}\n" for index, passage in enumerate(PASSAGES)))
    assert main(["evaluate", "--model", str(folder), "--data", str(judged), "--json"]) == 0
    rank = 1 + int(np.sum(scores > scores[2]))
    assert json.loads(capsys.readouterr().out)["mrr@10"] == pytest.approx(1 / rank)
    best_first = list(np.argsort(-scores, kind="stable"))
    app = create_app(reranker_predictor(str(folder), PredictionSettings()), ServerLimits(max_wait_ms=1))
    with TestClient(app) as client:
        tei = client.post("/rerank", json={"query": QUERIES[0], "texts": PASSAGES})
        cohere = client.post("/v1/rerank", json={"query": QUERIES[0], "documents": PASSAGES, "top_n": 2})
    assert tei.status_code == 200 and [row["index"] for row in tei.json()] == best_first
    np.testing.assert_allclose([row["score"] for row in tei.json()], scores[best_first], atol=1e-5)
    assert cohere.status_code == 200 and [row["index"] for row in cohere.json()["results"]] == best_first[:2]


def test_a_logit_score_in_another_pipeline_is_refused(tmp_path):
    from kbert.errors import KbertError
    from kbert.tasks.reranking import causal_score

    (tmp_path / "1_LogitScore").mkdir()
    (tmp_path / "1_LogitScore" / "config.json").write_text(json.dumps({"true_token_id": 3, "false_token_id": 4}))
    (tmp_path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
        {"idx": 1, "name": "1", "path": "1_LogitScore",
         "type": "sentence_transformers.cross_encoder.modules.logit_score.LogitScore"}]))
    with pytest.raises(KbertError, match=r"\['Transformer', 'LogitScore'\]; kbert reads a causal LM's CrossEncoder "
                                         "as a text-generation Transformer, then a LogitScore"):
        causal_score(tmp_path)  # its Transformer gives hidden states (feature-extraction), not an LM's logits
    (tmp_path / "1_LogitScore" / "config.json").write_text(json.dumps({"true_token_id": "yes"}))
    with pytest.raises(KbertError, match="true_token_id 'yes', false_token_id None: expected token ids"):
        causal_score(tmp_path)


@pytest.mark.parametrize("lora, tied", [(False, True), (True, True), (False, False)])
@pytest.mark.parity
def test_training_a_causal_reranker_writes_a_cross_encoder(tmp_path, monkeypatch, lora, tied):
    """`kbert train --task rerank --checkpoint` on the CrossEncoder folder trains its LM (the head is the LM's own:
    logit(yes) − logit(no)), with LoRA too, and writes a CrossEncoder folder back that sentence-transformers
    scores as kbert does (within 1e-4), with its chat template, prompt and LogitScore. An untied LM head is
    read from the folder alone, the backbone's weights not read again."""
    from kbert.checkpoints import hf
    from kbert.cli.main import main
    from kbert.tasks.reranking import Reranker

    loads = []
    load = hf.load_hf_weights
    monkeypatch.setattr(hf, "load_hf_weights",
                        lambda *args, **kwargs: loads.append(load(*args, **kwargs)) or loads[-1])
    folder = cross_encoder_folder(tmp_path, tied=tied)
    write_judged_pairs(tmp_path / "pairs.tsv")
    out = tmp_path / "trained"
    assert main(["train", "--task", "rerank", "--checkpoint", str(folder), "--train", str(tmp_path / "pairs.tsv"),
                 "--out", str(out), "--epochs", "2", "--batch-size", "8", "--maxlen", "32", "--lr", "1e-2",
                 *(["--lora-rank", "4"] if lora else [])]) == 0
    trained = Reranker.load(out)
    np.testing.assert_allclose(trained.logits(QUERIES, PASSAGES), reference_logits(out), atol=1e-4)
    assert np.abs(trained.logits(QUERIES, PASSAGES) - Reranker.load(folder).logits(QUERIES, PASSAGES)).max() > 1e-3
    assert (out / "chat_template.jinja").read_text() == TEMPLATE
    assert json.loads((out / "1_LogitScore" / "config.json").read_text())["true_token_id"] == YES
    if not tied:
        assert loads[0].loaded == ["lm_head.weight"]


@pytest.mark.parity
def test_the_onnx_exports_of_a_decoder_score_and_embed_as_keras(tmp_path, capsys):
    """`kbert predict --runtime onnxruntime` (the float32 export) scores the causal CrossEncoder as Keras, and `kbert
    embed --runtime onnxruntime` gives a Qwen3-Embedding-style folder's vectors; with `--quantize int8`
    (onnxruntime's dynamic int8) each logit stays within a tenth of the logits' spread (Spearman ≥ 0.9), each
    vector within a cosine of 0.95 of Keras's float32 (what the export's own check allows)."""
    pytest.importorskip("tf2onnx", reason="the test extra (onnxruntime, tf2onnx) is not installed")
    import scipy.stats

    from conftest import cosines, kbert_in_process
    from kbert.cli.main import main
    from kbert.embeddings.embedder import Embedder
    from kbert.tasks.reranking import Reranker
    from test_decoders import TEXTS, qwen3_embedding_folder

    folder = cross_encoder_folder(tmp_path)
    queries, passages = [query for query in QUERIES[:3] for _ in PASSAGES], PASSAGES * 3  # 12 pairs, each its own
    expected = Reranker.load(folder, dtype="float32").logits(queries, passages)
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{query}\t{passage}\n" for query, passage in zip(queries, passages)))
    for options, allowed in ((["--runtime", "onnxruntime"], 1e-4), (["--quantize", "int8"], 0.1 * np.ptp(expected))):
        capsys.readouterr()
        assert main(["predict", "--model", str(folder), str(pairs), "--json", *options]) == 0
        logits = np.array([json.loads(line)["logit"] for line in capsys.readouterr().out.splitlines()])
        assert np.abs(logits - expected).max() <= allowed, options
    assert scipy.stats.spearmanr(logits, expected)[0] >= 0.9  # int8's: ranked near as float32 ranks them
    embedder_folder = qwen3_embedding_folder(tmp_path / "qwen3", "left")
    lines = tmp_path / "texts.txt"
    lines.write_text("\n".join(TEXTS) + "\n")
    keras_vectors = Embedder.load(embedder_folder, dtype="float32").encode(TEXTS)
    for options in (["--runtime", "onnxruntime"], ["--quantize", "int8"]):
        run = kbert_in_process("embed", "--model", str(embedder_folder), str(lines), *options)
        vectors = np.array([json.loads(line)["embedding"] for line in run.stdout.splitlines()])
        if options[0] == "--runtime":
            np.testing.assert_allclose(vectors, keras_vectors, atol=1e-5)
        else:
            similar = cosines(vectors, keras_vectors)
            assert similar.min() >= 0.95 and np.abs(vectors - keras_vectors).max() > 1e-6, similar
