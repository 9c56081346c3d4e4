"""The decoder families under the leading embedders and rerankers: Llama, Mistral, Qwen2, Qwen3, Gemma 3's text model
(`model_type` llama, mistral, qwen2, qwen3, gemma3_text). Their analytic tables against the counts transformers gives for the hub's shapes (built on
the `meta` device), the keys kbert cannot build named, and (in the parity venv) transformers' outputs on random
models it builds (drawn with `initializer_range` 0.3) for right- and left-padded rows and a row of one token, each
row's output the same alone as in the batch, kbert's files read back by transformers."""

import numpy as np
import pytest

from kbert import ConfigError, build_transformer_model
from kbert.analysis.params import analyze
from kbert.analysis.summary import crosscheck
from kbert.models.registry import resolve
from kbert.tokenizers.wordpiece import NEGATIVE_PADDING

V, H, I = 64, 16, 24
# Four query heads of 8 features (head_dim: the queries are 32 wide, not H) sharing two key/value heads.
TINY = {"vocab_size": V, "hidden_size": H, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": I, "max_position_embeddings": 64, "initializer_range": 0.3, "head_dim": 8}
LLAMA3 = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16}
# Each family with what sets it apart, on rows long enough for its windows and scaled frequencies to count.
FAMILIES = {
    "llama": {"model_type": "llama", **TINY, "attention_bias": True, "mlp_bias": True, "rope_parameters": LLAMA3},
    "llama_tied": {"model_type": "llama", **TINY, "tie_word_embeddings": True},
    "mistral": {"model_type": "mistral", **TINY, "sliding_window": 4},
    "qwen2": {"model_type": "qwen2", **TINY, "rope_parameters": YARN},
    "qwen3": {"model_type": "qwen3", **TINY, "use_sliding_window": True, "sliding_window": 3, "max_window_layers": 1},
    "qwen3_tied": {"model_type": "qwen3", **TINY, "tie_word_embeddings": True, "rope_parameters": LLAMA3},
    # Gemma 3: a sliding block (θ 50) then a full one (θ 1,000, scaled by 4), the scores' own scale; EmbeddingGemma's
    # bidirectional window (4 // 2 either side); the LM head soft-capped.
    "gemma3": {"model_type": "gemma3_text", **TINY, "sliding_window": 3, "sliding_window_pattern": 2,
               "query_pre_attn_scalar": 6, "rope_theta": 1000.0, "rope_local_base_freq": 50.0,
               "rope_scaling": {"rope_type": "linear", "factor": 4.0}},
    "gemma3_bidirectional": {"model_type": "gemma3_text", **TINY, "sliding_window": 4, "use_bidirectional_attention": True,
                             "layer_types": ["sliding_attention", "full_attention"]},
    "gemma3_tied": {"model_type": "gemma3_text", **TINY, "sliding_window": 3, "final_logit_softcapping": 2.0},
}
# The hub's shapes: Qwen3-Embedding-0.6B (and Qwen3-Reranker-0.6B, untied), gte-Qwen2-1.5B-instruct,
# e5-mistral-7b-instruct, Llama-3.2-1B.
HUB = {
    "qwen3": {"vocab_size": 151669, "hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16,
              "num_key_value_heads": 8, "intermediate_size": 3072, "tie_word_embeddings": True},
    "qwen2": {"vocab_size": 151646, "hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12,
              "num_key_value_heads": 2, "intermediate_size": 8960},
    "mistral": {"vocab_size": 32000, "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 8, "intermediate_size": 14336},
    "llama": {"vocab_size": 128256, "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
              "num_key_value_heads": 8, "intermediate_size": 8192, "tie_word_embeddings": True},
    "gemma3_text": {"vocab_size": 262144, "hidden_size": 768, "num_hidden_layers": 24, "num_attention_heads": 3,
                    "num_key_value_heads": 1, "intermediate_size": 1152, "head_dim": 256},
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_analytic_table_is_the_built_model(name):
    for flags in ({}, {"with_mlm": True}):
        analysis = analyze(resolve(FAMILIES[name])[1], **flags)
        model = build_transformer_model(FAMILIES[name], **flags)
        assert all(row.ok for row in crosscheck(analysis, model)) and model.count_params() == analysis.total


@pytest.mark.parametrize("model_type", sorted(HUB))
@pytest.mark.parity
def test_the_analytic_totals_are_transformers_counts_of_the_hub_shapes(model_type):
    torch = pytest.importorskip("torch", reason="the parity extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the parity extra is not installed")
    config = transformers.AutoConfig.for_model(model_type, **HUB[model_type])
    kbert_config = resolve({"model_type": model_type, **HUB[model_type]})[1]
    for flags, auto in (({}, transformers.AutoModel), ({"with_mlm": True}, transformers.AutoModelForCausalLM)):
        with torch.device("meta"):
            counted = sum(weight.numel() for weight in auto.from_config(config).parameters())
        assert analyze(kbert_config, **flags).total == counted


@pytest.mark.parametrize("changed, message", [
    ({"rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}},
     "rope_type 'dynamic' scales the rotary positions; kbert builds rope_type 'default' or 'linear' or 'llama3' or "
     "'yarn' here"),
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0}},
     "rope_type 'llama3' needs 'low_freq_factor', 'high_freq_factor', 'original_max_position_embeddings'"),
    ({"rope_scaling": {"type": "yarn"}}, "key 'rope_scaling': rope_type 'yarn' needs 'factor'"),
    ({"partial_rotary_factor": 0.5}, "key 'partial_rotary_factor' is 0.5: kbert turns a head's every feature"),
    ({"num_key_value_heads": 3}, "key 'num_key_value_heads': expected a whole number that divides"),
    ({"head_dim": 7}, "key 'head_dim': 7 features a head, an odd number"),
    ({"use_sliding_window": True, "layer_types": ["full_attention"]}, "key 'layer_types': expected 2 of"),
    ({"model_type": "gemma3_text", "rope_parameters": {"sliding_attention": {"rope_type": "linear", "factor": 2.0}}},
     r"\(sliding_attention layers\): key 'rope_parameters': rope_type 'linear' scales the rotary positions; kbert "
     "builds rope_type 'default' here"),
    ({"model_type": "gemma3_text", "rope_parameters": {"rope_type": "default"}},
     "key 'rope_parameters': expected an object of 'full_attention' and 'sliding_attention'"),
    ({"model_type": "gemma3_text", "query_pre_attn_scalar": 0}, "key 'query_pre_attn_scalar': expected a finite pos"),
    ({"model_type": "gemma3_text", "final_logit_softcapping": float("nan")},
     "key 'final_logit_softcapping': expected a finite positive number, got nan"),
])
def test_keys_kbert_cannot_build_are_named(changed, message):
    with pytest.raises(ConfigError, match=message):
        resolve({**FAMILIES["qwen3"], **changed})


def test_gemmas_layers_as_transformers_reads_them():
    """The older keys (sliding_window_pattern, rope_local_base_freq, rope_scaling on the full layers alone) and
    transformers 5's rope_parameters by layer type give the same model; a bidirectional sliding layer sees
    sliding_window // 2 either side (transformers' exclusive bound sliding_window // 2 + 1), a causal one the
    sliding_window keys ending at each query."""
    older = resolve({**FAMILIES["gemma3"], "num_hidden_layers": 3})[1]
    assert older.layer_types == ("sliding_attention", "full_attention", "sliding_attention")
    assert [older.rope_of(index) for index in range(2)] == [(50.0, None, None), (1000.0, 4.0, None)]
    newer = {key: value for key, value in FAMILIES["gemma3"].items()
             if key not in ("rope_theta", "rope_local_base_freq", "rope_scaling", "sliding_window_pattern")}
    newer = resolve({**newer, "layer_types": ["sliding_attention", "full_attention"], "rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 50.0}}})[1]
    assert [newer.rope_of(index) for index in range(2)] == [(50.0, None, None), (1000.0, 4.0, None)]
    assert resolve(newer.to_dict())[1] == newer and resolve(newer.to_hf_dict())[1] == newer
    bidirectional = resolve(FAMILIES["gemma3_bidirectional"])[1]
    assert (bidirectional.window_of(0), bidirectional.window_of(1), older.window_of(0)) == (2, None, 3)


def test_keys_a_family_never_reads_change_nothing():
    """transformers' Qwen2 has biases on q, k and v whatever attention_bias says, Llama no sliding window,
    Qwen's window only where use_sliding_window; kbert reads each as transformers does."""
    assert resolve({**FAMILIES["qwen2"], "attention_bias": False})[1].attention_bias
    assert resolve({**FAMILIES["llama"], "sliding_window": 4})[1].window_of(0) is None
    assert resolve({**FAMILIES["qwen3"], "use_sliding_window": False})[1].window_of(1) is None
    windows = resolve(FAMILIES["qwen3"])[1]
    assert (windows.window_of(0), windows.window_of(1)) == (None, 3)  # from max_window_layers 1 on
    assert resolve({**FAMILIES["mistral"], "layer_types": ["full_attention"] * 2})[1].window_of(0) == 4
    unwindowed = resolve({**FAMILIES["mistral"], "sliding_window": None})[1]
    assert resolve(unwindowed.to_dict())[1].sliding_window is None  # null kept, not read as the 4,096 default


def test_yarns_original_length_defaults_to_the_familys_longest_input():
    """transformers fills yarn's original_max_position_embeddings with max_position_embeddings, the family's
    default where the file has none (Qwen3: 32,768, not Llama's 2,048)."""
    yarn = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}
    shape = {key: value for key, value in FAMILIES["qwen3"].items() if key != "max_position_embeddings"}
    assert resolve({**shape, "rope_parameters": yarn})[1].scaled_rope["original_max_position_embeddings"] == 32768
    assert resolve({**shape, "rope_parameters": yarn, "max_position_embeddings": 40})[1].scaled_rope[
        "original_max_position_embeddings"] == 40


def test_is_causal_false_is_read_as_bidirectional():
    assert resolve({**FAMILIES["qwen2"], "is_causal": False})[1].use_bidirectional_attention
    with pytest.raises(ConfigError, match="keys 'is_causal' True and 'use_bidirectional_attention' True disagree"):
        resolve({**FAMILIES["qwen2"], "is_causal": True, "use_bidirectional_attention": True})


def padded_batch():
    """Four rows of 9 random ids past 0, and which are real: whole, right-padded after 6, left-padded before 4,
    and one token at the end (a left-padded row of length 1)."""
    tokens = np.random.default_rng(0).integers(1, V, (4, 9))
    real = np.ones_like(tokens, dtype=bool)
    real[1, 6:], real[2, :4], real[3, :8] = False, False, False
    return tokens, real


def test_the_first_token_reads_what_follows_only_where_bidirectional():
    """A causal model's first position is the same whatever follows it; `use_bidirectional_attention` (an
    embedder trained so) lets it read the whole row."""
    tokens, _ = padded_batch()
    changed = tokens.copy()
    changed[:, -1] = (tokens[:, -1] % (V - 1)) + 1
    for bidirectional in (False, True):
        model = build_transformer_model({**FAMILIES["qwen3"], "use_bidirectional_attention": bidirectional})
        first, again = (model.predict_on_batch([ids, np.zeros_like(ids)])[:, 0] for ids in (tokens, changed))
        assert np.abs(first - again).max() > 1e-3 if bidirectional else np.array_equal(first, again)


@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parity
def test_same_outputs_as_transformers_either_padding_and_read_back(tmp_path, name):
    """Hidden states (with the LM head: logits) at the real positions within 1e-4 of transformers'; the padding
    given as negative ids (hidden because the text ended, whatever id a tokenizer pads with); each row alone gives
    its batched output; transformers reads kbert's file and shards back to the same outputs."""
    torch = pytest.importorskip("torch", reason="the parity extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the parity extra is not installed")
    from test_hf_families import transformers_reads_back

    config = FAMILIES[name]
    with_mlm = name.endswith("tied")
    architecture = getattr(transformers, resolve(config)[0].hf_architecture(
        __import__("kbert").models.heads.Heads(mlm="linear" if with_mlm else None)))
    tokens, real = padded_batch()

    def outputs(model):
        with torch.no_grad():
            result = model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(real.astype(np.int64)))
        return (result.logits if with_mlm else result.last_hidden_state).numpy()[real]

    torch.manual_seed(0)
    reference = architecture(transformers.AutoConfig.for_model(**config)).eval()
    with torch.no_grad():  # norms off their start (Gemma's at 0: times 1 + 0), so that each norm's weights count
        for name, weight in reference.named_parameters():
            if "norm" in name:
                weight.add_(torch.randn_like(weight) * 0.3)
    reference.save_pretrained(tmp_path / "hf")
    expected = outputs(reference)
    model = build_transformer_model(tmp_path / "hf" / "config.json", tmp_path / "hf", padding=NEGATIVE_PADDING,
                                    **({"with_mlm": "linear"} if with_mlm else {}))
    ids = np.where(real, tokens, -1)
    batched = model.predict_on_batch([ids, np.zeros_like(ids)])
    np.testing.assert_allclose(batched[real], expected, atol=1e-4)
    for row in range(len(tokens)):
        alone = tokens[row:row + 1, real[row]]
        np.testing.assert_allclose(model.predict_on_batch([alone, np.zeros_like(alone)])[0], batched[row][real[row]],
                                   atol=1e-5)
    transformers_reads_back(model, transformers, architecture.__name__, tmp_path, outputs, expected)


@pytest.mark.parametrize("name", ["qwen3_embedding_0_6b", "qwen3_reranker_0_6b", "gte_qwen2_1_5b_instruct",
                                  "e5_mistral_7b_instruct", "embeddinggemma_300m"])
@pytest.mark.parity
def test_bundled_configs_count_what_transformers_counts(name):
    """`kbert params` of each bundled decoder config: the total transformers gives for the same file, built on the
    `meta` device (the bare model for the embedders, the causal LM for the reranker, whose head scores)."""
    import json

    torch = pytest.importorskip("torch", reason="the parity extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the parity extra is not installed")
    from kbert.models.config import bundled_config_path

    path = bundled_config_path(name)
    config = transformers.AutoConfig.for_model(**json.loads(open(path).read()))
    with_mlm = "reranker" in name
    auto = transformers.AutoModelForCausalLM if with_mlm else transformers.AutoModel
    with torch.device("meta"):
        counted = sum(weight.numel() for weight in auto.from_config(config).parameters())
    assert analyze(resolve(path)[1], with_mlm=with_mlm).total == counted


# --- a decoder embedder: a sentence-transformers folder as Qwen3-Embedding's ---------------------------------------

END = "<|endoftext|>"
QUERY = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
TEXTS = ["w5 w6 w7 w8 w9", "w10", "w11 w12 w13", "w62 w61 w60 w59 w58 w57 w56 w55 w54"]


def qwen3_embedding_folder(folder, padding_side):
    """A random Qwen3Model that transformers builds (seed 0), framed as Qwen3-Embedding: a word-level
    tokenizer.json whose one special token, `<|endoftext|>`, ends every text and pads (on `padding_side`);
    last-token pooling, normalised; a query prompt and an empty document one."""
    import json

    torch = pytest.importorskip("torch", reason="the parity extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the parity extra is not installed")
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    from kbert.embeddings.folders import write_modules

    end = V - 1
    backend = Tokenizer(models.WordLevel({**{f"w{index}": index for index in range(end)}, END: end}, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single=f"$A {END}", pair=f"$A {END} $B {END}",
                                                           special_tokens=[(END, end)])
    folder.mkdir()
    backend.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": END, "pad_token": END, "padding_side": padding_side}))
    torch.manual_seed(0)
    config = {**FAMILIES["qwen3"], "eos_token_id": end, "pad_token_id": end}
    transformers.Qwen3Model(transformers.AutoConfig.for_model(**config)).eval().save_pretrained(folder)
    write_modules(str(folder), "lasttoken", H, [], True, 32, prompts={"query": "w1 w2 w3 ", "document": ""})
    return folder


@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parity
def test_a_qwen3_embedder_gives_sentence_transformers_vectors(tmp_path, padding_side):
    """Its pad token ends every text, so a mask made from ids would hide the very token last-token pooling reads:
    kbert pads with negative ids and pools the last real token, alone or in a batch, either padding side; each
    prompt, the CLI's --prompt-name and --dimensions (the first values, back at unit length) as
    sentence-transformers' encode gives them; kbert's save read back by sentence-transformers."""
    import json

    sentence_transformers = pytest.importorskip("sentence_transformers", reason="the parity extra is not installed")
    from conftest import kbert_in_process

    folder = qwen3_embedding_folder(tmp_path / "qwen3", padding_side)
    reference, embedder = embeds_as_sentence_transformers(folder)
    lines = tmp_path / "texts.txt"
    lines.write_text("\n".join(TEXTS) + "\n")
    run = kbert_in_process("embed", "--model", str(folder), str(lines), "--prompt-name", "query", "--dimensions", "8",
                           "--runtime", "keras")
    vectors = np.array([json.loads(line)["embedding"] for line in run.stdout.splitlines()])
    truncated = sentence_transformers.SentenceTransformer(str(folder), device="cpu", truncate_dim=8)
    np.testing.assert_allclose(vectors, truncated.encode(TEXTS, prompt_name="query", normalize_embeddings=True),
                               atol=1e-5)
    again = sentence_transformers.SentenceTransformer(embedder.save(tmp_path / "saved"), device="cpu")
    np.testing.assert_allclose(again.encode(TEXTS, prompt_name="query"), reference.encode(TEXTS, prompt_name="query"),
                               atol=1e-5)
    served_openai, served_tei = served(embedder)
    np.testing.assert_allclose(served_openai, truncated.encode(TEXTS, normalize_embeddings=True), atol=1e-5)
    np.testing.assert_allclose(served_tei, reference.encode(TEXTS, prompt_name="query"), atol=1e-5)


def embeds_as_sentence_transformers(folder):
    """sentence-transformers' model of `folder` and kbert's `Embedder`, having checked that for each prompt kbert's
    vectors are sentence-transformers' (within 1e-5), each text's the same alone as in the padded batch."""
    import sentence_transformers

    from kbert.embeddings.embedder import Embedder

    reference = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    embedder = Embedder.load(folder)
    for prompt in ("query", "document"):
        expected = reference.encode(TEXTS, prompt_name=prompt)
        batched = embedder.encode(TEXTS, prompt_name=prompt)
        np.testing.assert_allclose(batched, expected, atol=1e-5)
        np.testing.assert_allclose([embedder.encode([text], prompt_name=prompt)[0] for text in TEXTS], batched,
                                   atol=1e-5)
    return reference, embedder


def served(embedder):
    """The vectors `kbert serve` answers (its app, in this process): /v1/embeddings with dimensions 8, and TEI's
    /embed with prompt_name query."""
    from starlette.testclient import TestClient

    from kbert.serving import ServerLimits, create_app
    from kbert.tasks.predictors import PredictionSettings, embedding_predictor

    app = create_app(embedding_predictor("qwen3", PredictionSettings(), embedder), ServerLimits(max_wait_ms=1))
    with TestClient(app) as client:
        openai = client.post("/v1/embeddings", json={"input": TEXTS, "dimensions": 8, "encoding_format": "float"})
        tei = client.post("/embed", json={"inputs": TEXTS, "prompt_name": "query"})
    assert openai.status_code == 200 and tei.status_code == 200, (openai.text, tei.text)
    return [row["embedding"] for row in openai.json()["data"]], tei.json()


@pytest.mark.parity
def test_training_a_qwen3_embedder_keeps_its_pooling_and_prompts(tmp_path):
    """`kbert train --task embed --checkpoint FOLDER` on the Qwen3-Embedding-style folder trains it as it embeds:
    last-token pooling and its prompts are written back (before: mean pooling and no prompts), and
    sentence-transformers reads the trained folder to kbert's vectors."""
    import json

    sentence_transformers = pytest.importorskip("sentence_transformers", reason="the parity extra is not installed")
    from kbert.cli.main import main
    from kbert.embeddings.embedder import Embedder

    folder = qwen3_embedding_folder(tmp_path / "qwen3", "left")
    rng = np.random.default_rng(0)
    rows = [" ".join(f"w{index}" for index in rng.integers(1, V - 1, rng.integers(2, 9))) for _ in range(32)]
    (tmp_path / "pairs.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in zip(rows, rows[1:] + rows[:1])))
    assert main(["train", "--task", "embed", "--checkpoint", str(folder), "--train", str(tmp_path / "pairs.tsv"),
                 "--out", str(tmp_path / "trained"), "--epochs", "1", "--batch-size", "8"]) == 0
    pooling = json.loads((tmp_path / "trained" / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_lasttoken"] and not pooling["pooling_mode_mean_tokens"]
    trained = Embedder.load(tmp_path / "trained")
    assert trained.prompts == {"query": "w1 w2 w3 ", "document": ""}
    expected = sentence_transformers.SentenceTransformer(str(tmp_path / "trained"), device="cpu").encode(
        TEXTS, prompt_name="query")
    np.testing.assert_allclose(trained.encode(TEXTS, prompt_name="query"), expected, atol=1e-5)
    assert np.abs(trained.encode(TEXTS) - Embedder.load(folder).encode(TEXTS)).max() > 1e-3  # it trained


def embeddinggemma_folder(folder):
    """A random bidirectional Gemma3TextModel that transformers builds (seed 0, its norms off 0), framed as
    EmbeddingGemma: a word-level tokenizer.json that wraps each text in `<bos>` and `<eos>` and pads with `<pad>`
    (id 0) on the right; mean pooling, two bias-free Dense projections (H → 2H → H), normalised; its task prompts."""
    import json

    torch = pytest.importorskip("torch", reason="the parity extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the parity extra is not installed")
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    from kbert.embeddings.folders import write_modules
    from kbert.embeddings.modules import Dense

    specials = {"<pad>": 0, "<eos>": 1, "<bos>": 2}
    backend = Tokenizer(models.WordLevel({**specials, **{f"w{index}": index for index in range(3, V)}},
                                         unk_token="w3"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="<bos> $A <eos>", pair="<bos> $A <eos> $B <eos>",
                                                           special_tokens=[("<bos>", 2), ("<eos>", 1)])
    folder.mkdir()
    backend.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
        "pad_token": "<pad>", "padding_side": "right"}))
    torch.manual_seed(0)
    model = transformers.Gemma3TextModel(transformers.AutoConfig.for_model(**FAMILIES["gemma3_bidirectional"]))
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "norm" in name:
                weight.add_(torch.randn_like(weight) * 0.3)
    model.eval().save_pretrained(folder)
    rng = np.random.default_rng(0)
    dense = [Dense([rng.normal(0, 0.3, (H, 2 * H)).astype(np.float32)]),
             Dense([rng.normal(0, 0.3, (2 * H, H)).astype(np.float32)])]
    write_modules(str(folder), "mean", H, dense, True, 32,
                  prompts={"query": "w4 w5 ", "document": "w6 w7 w8 "})
    return folder


@pytest.mark.parity
def test_an_embeddinggemma_folder_gives_sentence_transformers_vectors(tmp_path):
    """Gemma 3 made bidirectional, its sliding layers a window either side, mean pooling then two Dense
    projections: sentence-transformers' vectors for each prompt, a text's vector the same alone as in a padded
    batch, through `kbert embed` too; kbert's save read back by sentence-transformers."""
    import json

    sentence_transformers = pytest.importorskip("sentence_transformers", reason="the parity extra is not installed")
    from conftest import kbert_in_process

    folder = embeddinggemma_folder(tmp_path / "gemma")
    reference, embedder = embeds_as_sentence_transformers(folder)
    lines = tmp_path / "texts.txt"
    lines.write_text("\n".join(TEXTS) + "\n")
    run = kbert_in_process("embed", "--model", str(folder), str(lines), "--prompt-name", "document",
                           "--runtime", "keras")
    vectors = np.array([json.loads(line)["embedding"] for line in run.stdout.splitlines()])
    np.testing.assert_allclose(vectors, reference.encode(TEXTS, prompt_name="document"), atol=1e-5)
    again = sentence_transformers.SentenceTransformer(embedder.save(tmp_path / "saved"), device="cpu")
    np.testing.assert_allclose(again.encode(TEXTS, prompt_name="query"), reference.encode(TEXTS, prompt_name="query"),
                               atol=1e-5)
