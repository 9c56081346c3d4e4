"""Generation: the key/value cache gives the full model's tokens; greedy, beam and sampling for every family."""

import gc
import weakref

import keras
import numpy as np
import pytest

from kbert import KbertError, build_transformer_model, generate
from kbert.generation import cache
from kbert.generation.engines import CachedEngine, FullEngine

FAMILIES = ["bert", "albert", "nezha", "roformer", "roformer_v2"]
GPT_FAMILIES = ["gpt", "gpt2", "gpt2_ml"]  # language models by construction: "lm" only
PROMPTS = [[2, 5, 7, 9, 11], [2, 13]]  # different lengths: the batch is padded


def small_model(family: str, application: str, with_mlm=True):
    keras.utils.set_random_seed(7)
    config = {"vocab_size": 120, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
              "intermediate_size": 64, "max_position_embeddings": 64, "type_vocab_size": 2}
    if family == "albert":
        config["embedding_size"] = 16
    heads = {} if family in GPT_FAMILIES else {"with_mlm": with_mlm}
    return build_transformer_model(config, model=family, application=application, **heads)


@pytest.fixture(scope="module", params=[(f, a) for f in FAMILIES for a in ("lm", "unilm")]
                + [(f, "lm") for f in GPT_FAMILIES], ids=lambda p: f"{p[0]}-{p[1]}")
def model(request):
    return small_model(*request.param)


def test_cache_gives_the_full_models_probabilities_and_tokens(model):
    cached, full = CachedEngine(model, 32), FullEngine(model, 32)
    segments = [[0] * len(p) for p in PROMPTS]
    differences = [np.abs(cached.start(PROMPTS, segments) - full.start(PROMPTS, segments)).max()]
    for token in range(10, 20):
        tokens, rows = np.array([token, token + 30]), np.arange(2)
        differences.append(np.abs(cached.extend(tokens, rows) - full.extend(tokens, rows)).max())
    assert max(differences) < 1e-5
    # 32 greedy steps (no end token), cached and recomputed.
    tokens = generate(model, PROMPTS, max_new_tokens=32, end_id=-1)
    assert [len(row) for row in tokens] == [32, 32]
    assert tokens == generate(model, PROMPTS, max_new_tokens=32, end_id=-1, use_cache=False)


def test_each_generated_token_is_the_models_choice_on_the_whole_sequence(model):
    """Independent of both engines: feed prompt + tokens so far (target segment 1 for unilm), take argmax."""
    (tokens,) = generate(model, PROMPTS[:1], max_new_tokens=6, end_id=-1)
    unilm = model.build_spec["application"] == "unilm"
    for step in range(6):
        ids = PROMPTS[0] + tokens[:step]
        segments = [0] * len(PROMPTS[0]) + [int(unilm)] * step
        inputs = [np.array([ids]), np.array([segments])][:len(model.inputs)]
        probabilities = keras.ops.convert_to_numpy(model(inputs))[0, -1]
        probabilities[0] = 0  # the padding id, which generation never picks
        assert probabilities.argmax() == tokens[step]


def sequence_log_prob(model, prompt, continuation, end_id, ended=True):
    """The log-probability of `continuation` (and of the end token after it, if the sequence `ended`)."""
    engine = FullEngine(model, len(continuation) + 1)
    log_probs = engine.start([prompt], [[0] * len(prompt)])
    total = 0.0
    for token in continuation + ([end_id] if ended else []):
        total += log_probs[0, token]
        log_probs = engine.extend(np.array([token]), np.array([0]))
    return total


def test_beam_search(model):
    end_id = 3
    beams = generate(model, PROMPTS, max_new_tokens=10, end_id=end_id, strategy="beam", beam_size=4)
    assert beams == generate(model, PROMPTS, max_new_tokens=10, end_id=end_id, strategy="beam", beam_size=4,
                             use_cache=False)
    greedy = generate(model, PROMPTS, max_new_tokens=10, end_id=end_id)
    assert generate(model, PROMPTS, max_new_tokens=10, end_id=end_id, strategy="beam", beam_size=1) == greedy
    for prompt, beam, path in zip(PROMPTS, beams, greedy):
        if len(beam) < 10 and len(path) < 10:  # both ended: the end token's probability counts in both
            assert sequence_log_prob(model, prompt, beam, end_id, True) >= \
                sequence_log_prob(model, prompt, path, end_id, True) - 1e-6
    # With no end token every sequence has max_new_tokens tokens, so every pair compares.
    beams = generate(model, PROMPTS, max_new_tokens=6, end_id=-1, strategy="beam", beam_size=4)
    greedy = generate(model, PROMPTS, max_new_tokens=6, end_id=-1)
    for prompt, beam, path in zip(PROMPTS, beams, greedy):
        assert len(beam) == len(path) == 6
        assert sequence_log_prob(model, prompt, beam, -1, False) >= \
            sequence_log_prob(model, prompt, path, -1, False) - 1e-6


# Sampling is the engine's, the same for every family; the default suite samples from one encoder made a language
# model and one GPT, CI's examples run from every model above (3 to 8 s each).
SAMPLED = [("bert", "unilm"), ("gpt2", "lm")]


@pytest.mark.parametrize("family, application", SAMPLED + [
    pytest.param(family, application, marks=pytest.mark.examples)
    for family, application in [(f, a) for f in FAMILIES for a in ("lm", "unilm")] + [(f, "lm") for f in GPT_FAMILIES]
    if (family, application) not in SAMPLED])
def test_sampling_is_reproducible_and_top_k_1_is_greedy(family, application):
    model = small_model(family, application)
    kwargs = dict(max_new_tokens=12, end_id=-1, strategy="sample", seed=3)
    first = generate(model, PROMPTS, **kwargs)
    assert first == generate(model, PROMPTS, **kwargs) == generate(model, PROMPTS, use_cache=False, **kwargs)
    assert first != generate(model, PROMPTS, **{**kwargs, "seed": 4})
    assert generate(model, PROMPTS, top_k=1, **kwargs) == generate(model, PROMPTS, max_new_tokens=12, end_id=-1)
    nucleus = generate(model, PROMPTS, top_p=0.3, temperature=0.7, **kwargs)
    assert [len(row) for row in nucleus] == [12, 12]
    # The compiled loop (TensorFlow, JAX) picks as the NumPy sampler does, from the same draws.
    for options in ({"top_p": 0.3, "temperature": 0.7}, {"top_k": 5, "temperature": 1.5}):
        assert generate(model, PROMPTS, use_cache=False, **options, **kwargs) == \
            generate(model, PROMPTS, **options, **kwargs)


def test_compiled_nucleus_sampling_from_the_candidates_and_past_them(monkeypatch):
    """Nucleus sampling ranks NUCLEUS_CANDIDATES tokens first, and the whole vocabulary where the nucleus is
    larger: both give the NumPy sampler's tokens."""
    monkeypatch.setattr(cache, "NUCLEUS_CANDIDATES", 4)
    model = small_model("gpt2", "lm")  # a new model: its sampling loops are compiled with 4 candidates
    for top_p, temperature in ((0.05, 0.5), (0.9, 2.0)):  # a nucleus within 4 tokens; one far past them
        kwargs = dict(max_new_tokens=10, end_id=-1, strategy="sample", seed=1, top_p=top_p, temperature=temperature)
        expected = generate(model, PROMPTS, use_cache=False, **kwargs)
        assert generate(model, PROMPTS, **kwargs) == expected
    assert len(set(expected[0])) > 4  # the wide nucleus did reach past the candidates


def test_sampled_rows_end_at_different_steps_as_the_numpy_sampler_ends_them(model):
    kwargs = dict(max_new_tokens=12, strategy="sample", seed=5, temperature=0.5)
    reference = generate(model, PROMPTS, end_id=-1, use_cache=False, **kwargs)
    for end_id in (reference[0][3], reference[1][0]):
        for minimum in (0, 2):
            expected = generate(model, PROMPTS, end_id=end_id, min_new_tokens=minimum, use_cache=False, **kwargs)
            assert generate(model, PROMPTS, end_id=end_id, min_new_tokens=minimum, **kwargs) == expected
            assert any(len(row) < 12 for row in expected) or minimum


def test_end_token_and_minimum_length():
    model = small_model("bert", "unilm")
    (first,) = generate(model, PROMPTS[:1], max_new_tokens=1, end_id=-1)
    end_id = first[0]  # the token greedy decoding picks first: it ends at once
    assert generate(model, PROMPTS[:1], max_new_tokens=5, end_id=end_id) == [[]]
    (row,) = generate(model, PROMPTS[:1], max_new_tokens=5, end_id=end_id, min_new_tokens=2)
    assert len(row) >= 2 and end_id not in row[:2]


def hf_gpt2(end_id: int):
    """A tiny GPT-2 from a Hugging Face config whose padding id is its end id (as fine-tuned GPT-2s often have)."""
    keras.utils.set_random_seed(7)
    return build_transformer_model({"model_type": "gpt2", "vocab_size": 120, "n_embd": 32, "n_layer": 2, "n_head": 4,
                                    "n_positions": 64, "activation_function": "gelu_new", "eos_token_id": end_id,
                                    "pad_token_id": end_id}, model="gpt2")


def test_a_padding_id_that_is_the_end_id_is_an_end_not_padding():
    (first,) = generate(hf_gpt2(end_id=119), PROMPTS[:1], max_new_tokens=1, end_id=-1)
    model = hf_gpt2(end_id=first[0])  # the same weights; the token greedy decoding picks first ends it at once
    for use_cache in (True, False):
        assert generate(model, PROMPTS[:1], max_new_tokens=5, end_id=first[0], use_cache=use_cache) == [[]]
    # A prompt that ends with that token is taken whole: its next token is the model's choice after it.
    prompt = PROMPTS[0] + [first[0]]
    full = keras.ops.convert_to_numpy(model.predict(np.array([prompt]), verbose=0))[0, -1]
    assert generate(model, [prompt], max_new_tokens=1, end_id=-1) == [[int(full.argmax())]]


def test_a_list_prompt_is_taken_whole_and_an_array_is_unpadded():
    model = small_model("bert", "lm")
    padded = [PROMPTS[1] + [0, 0]]
    assert generate(model, np.array(padded), max_new_tokens=4, end_id=-1) == \
        generate(model, PROMPTS[1:], max_new_tokens=4, end_id=-1)
    assert generate(model, padded, max_new_tokens=4, end_id=-1) == \
        generate(model, padded, max_new_tokens=4, end_id=-1, use_cache=False)
    assert generate(model, padded, max_new_tokens=4, end_id=-1) != generate(model, PROMPTS[1:], max_new_tokens=4,
                                                                              end_id=-1)


def test_rows_ending_at_different_steps_get_the_full_models_tokens(model):
    """Greedy decoding's compiled loop (TensorFlow, JAX): a row that ends stops, the others go on."""
    reference = generate(model, PROMPTS, max_new_tokens=12, end_id=-1, use_cache=False)
    for end_id in (reference[0][4], reference[1][0]):
        for minimum in (0, 3):
            kwargs = dict(max_new_tokens=12, end_id=end_id, min_new_tokens=minimum)
            assert generate(model, PROMPTS, **kwargs) == generate(model, PROMPTS, use_cache=False, **kwargs)


def test_linear_mlm_and_a_saved_model(tmp_path):
    model = small_model("roformer", "lm", with_mlm="linear")
    expected = generate(model, PROMPTS, max_new_tokens=8, end_id=-1)
    model.save(tmp_path / "lm.keras")
    loaded = keras.saving.load_model(tmp_path / "lm.keras", safe_mode=True)
    assert loaded.build_spec == model.build_spec
    assert generate(loaded, PROMPTS, max_new_tokens=8, end_id=-1) == expected


def test_clear_errors():
    encoder = build_transformer_model("configs/bert_tiny.json", with_mlm=True)
    with pytest.raises(KbertError, match=r"generation needs a model from build_transformer_model\(\.\.\., "
                                         r"application='lm' or 'unilm', with_mlm=True\), a GPT family's"):
        generate(encoder, PROMPTS, max_new_tokens=4, end_id=3)
    model = small_model("bert", "lm")
    with pytest.raises(KbertError, match="a prompt of 5 tokens and max_new_tokens 61 need 65 positions; the "
                                         "model has max_position_embeddings 64"):
        generate(model, PROMPTS, max_new_tokens=61, end_id=3)
    # Every position used: the 60th new token is chosen at position 63, the last.
    for use_cache in (True, False):
        assert [len(row) for row in generate(model, PROMPTS, max_new_tokens=60, end_id=-1,
                                             use_cache=use_cache)] == [60, 60]
    for keywords, message in [({"top_p": 0}, r"top_p must be in \(0, 1\]"), ({"top_p": -0.5}, "top_p must be"),
                              ({"top_p": 1.5}, "top_p must be"), ({"top_k": 0}, "top_k must be a whole number"),
                              ({"top_k": -1}, "top_k must be"), ({"top_k": 2.0}, "top_k must be")]:
        with pytest.raises(KbertError, match=message):
            generate(model, PROMPTS, max_new_tokens=4, end_id=3, strategy="sample", **keywords)
    with pytest.raises(KbertError, match="strategy: expected one of greedy, beam, sample, got 'top'"):
        generate(model, PROMPTS, max_new_tokens=4, end_id=3, strategy="top")
    for empty in ([[2], []], np.array([[2, 0], [0, 0]])):  # an array's padding is stripped; a list is as given
        with pytest.raises(KbertError, match="every prompt needs at least one token"):
            generate(model, empty, max_new_tokens=4, end_id=3)
    # Checked before any step: a compiled step (JAX) could not say which id is wrong.
    for row, found in (([2, 120], 120), ([-1, 2], -1)):
        with pytest.raises(KbertError, match=rf"token_ids, row 1: ids must be in \[0, 120\) \(the model's "
                                             rf"vocab_size\), found {found}"):
            generate(model, [[2], row], max_new_tokens=4, end_id=3)


def test_a_bert4keras_decoder_ports_unchanged():
    """bert4keras's UniLM recipe: the step appends output_ids to the source with segment 1."""
    from kbert import AutoRegressiveDecoder

    model = small_model("bert", "unilm")
    end_id = 3

    class Seq2Seq(AutoRegressiveDecoder):
        @AutoRegressiveDecoder.wraps(default_rtype="probas")
        def predict(self, inputs, output_ids, states):
            token_ids, segment_ids = inputs
            token_ids = np.concatenate([token_ids, output_ids], 1)
            segment_ids = np.concatenate([segment_ids, np.ones_like(output_ids)], 1)
            return self.last_token(model).predict([token_ids, segment_ids], verbose=0)

    decoder = Seq2Seq(start_id=None, end_id=end_id, maxlen=12)
    source = np.array(PROMPTS[0])
    (greedy,) = generate(model, [PROMPTS[0]], max_new_tokens=12, end_id=end_id)
    expected = greedy + [end_id] if len(greedy) < 12 else greedy
    assert decoder.beam_search([source, np.zeros_like(source)], topk=1).tolist() == expected
    samples = decoder.random_sample([source, np.zeros_like(source)], n=2, topk=1)
    assert [row.tolist() for row in samples] == [expected, expected]
    best = decoder.beam_search([source, np.zeros_like(source)], topk=3)
    assert len(best) <= 12 and (best[-1] == end_id or len(best) == 12)


def test_a_model_is_freed_after_generating():
    # The cached graph lives on the model: a model no longer used is collected, graph and all.
    model = small_model("bert", "unilm")
    generate(model, PROMPTS, max_new_tokens=2, end_id=-1)
    assert generate(model, PROMPTS, max_new_tokens=2, end_id=-1, use_cache=False) == \
        generate(model, PROMPTS, max_new_tokens=2, end_id=-1)
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None


# --- T5: the encoder runs once per source; the decoder's self- and cross-attention are cached -------------
T5_VERSIONS = ["t5.1.0", "t5.1.1", "mt5.1.1"]


def small_t5(version: str, part: str = ""):
    keras.utils.set_random_seed(7)
    config = {"vocab_size": 120, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
              "attention_head_size": 8, "intermediate_size": 64, "relative_attention_num_buckets": 8,
              "hidden_act": "relu" if version == "t5.1.0" else ["gelu", "linear"]}
    model = build_transformer_model(config, model=version + part)
    for weight in model.weights:  # T5's position biases start at zero: random ones make the test see them
        if "Relative-Position" in weight.path:
            weight.assign(np.random.default_rng(1).normal(size=weight.shape))
    return model


@pytest.fixture(scope="module", params=T5_VERSIONS)
def t5(request):
    return small_t5(request.param)


@pytest.mark.parametrize("start_id", [1, 0])
def test_t5_cache_gives_the_full_models_probabilities_and_tokens(t5, start_id):
    """Start id 0 is T5's padding id: the model hides it from later tokens, and so does the cache."""
    cached, full = CachedEngine(t5, 32, start_id), FullEngine(t5, 32, start_id)
    differences = [np.abs(cached.start(PROMPTS, None) - full.start(PROMPTS, None)).max()]
    for token in range(10, 20):
        tokens, rows = np.array([token, token + 30]), np.arange(2)
        differences.append(np.abs(cached.extend(tokens, rows) - full.extend(tokens, rows)).max())
    assert max(differences) < 1e-5
    kwargs = dict(max_new_tokens=32, end_id=-1, start_id=start_id)
    tokens = generate(t5, PROMPTS, **kwargs)
    assert [len(row) for row in tokens] == [32, 32]
    assert tokens == generate(t5, PROMPTS, use_cache=False, **kwargs)
    beam = dict(max_new_tokens=10, end_id=3, strategy="beam", beam_size=3, start_id=start_id)
    assert generate(t5, PROMPTS, **beam) == generate(t5, PROMPTS, use_cache=False, **beam)


def test_t5_tokens_are_the_models_choice_given_the_source():
    """Independent of both engines: the whole model on [source, start + tokens so far], argmax at the end."""
    model = small_t5("t5.1.1")
    (tokens,) = generate(model, PROMPTS[:1], max_new_tokens=6, end_id=-1, start_id=1)
    for step in range(6):
        probabilities = keras.ops.convert_to_numpy(model([np.array(PROMPTS[:1]), np.array([[1] + tokens[:step]])]))
        assert probabilities[0, -1].argmax() == tokens[step]
    # The source matters: another source, other tokens.
    assert generate(model, [[2, 40, 41, 42]], max_new_tokens=6, end_id=-1, start_id=1) != [tokens]
    kwargs = dict(max_new_tokens=8, end_id=-1, strategy="sample", seed=3, start_id=1)
    assert generate(model, PROMPTS, **kwargs) == generate(model, PROMPTS, use_cache=False, **kwargs)


def test_t5_clear_errors():
    model = small_t5("t5.1.1")
    with pytest.raises(KbertError, match="start_id: a T5 model's decoder starts from a token"):
        generate(model, PROMPTS, max_new_tokens=4, end_id=3)
    with pytest.raises(KbertError, match="not its _encoder or _decoder part"):
        generate(small_t5("t5.1.1", "_encoder"), PROMPTS, max_new_tokens=4, end_id=3, start_id=1)
    with pytest.raises(KbertError, match="start_id is for encoder-decoder models"):
        generate(small_model("gpt2", "lm"), PROMPTS, max_new_tokens=4, end_id=3, start_id=1)


def test_compiled_beam_search_keeps_the_searchs_rules(model):
    """The compiled loop (TensorFlow, JAX; PyTorch runs the search in Python) against the search on full
    recomputation: an end token banned before min_new_tokens, a prompt's beams all ending early, one beam."""
    greedy = generate(model, PROMPTS, max_new_tokens=8, end_id=-1)
    end_id = greedy[0][1]  # the second token greedy picks for the first prompt: beams meet it early
    for options in (dict(min_new_tokens=3), dict(min_new_tokens=0), dict(min_new_tokens=2, beam_size=1)):
        options = {"beam_size": 3, **options}
        beams = generate(model, PROMPTS, max_new_tokens=8, end_id=end_id, strategy="beam", **options)
        assert beams == generate(model, PROMPTS, max_new_tokens=8, end_id=end_id, strategy="beam",
                                 use_cache=False, **options)
        assert all(len(row) >= options["min_new_tokens"] and end_id not in row for row in beams)
