"""A position is hidden because its text ended, never because of its id (round 6).

Each bundled hub config, shrunk, with its real pad / bos / eos ids: a text framed as its tokenizer frames it is the
same alone and in a padded batch, and none of its tokens is hidden. A tokenizer whose pad token also ends every
text (EuroBERT's `<|end_of_text|>`) pads with negative ids, hidden by length; Alibaba's config without a
`pad_token_id` (kbert's default 1) is padded and hidden as its BERT vocabulary pads (0). In the parity venv, such a
EuroBERT gives transformers' outputs under the tokenizer's own attention mask.

Issue 86: every `tokenizer.json` pads with negative ids, so a pad token a text holds (`[PAD]` typed in a query:
the tokenizers library reads it as the token) is a real token, as sentence-transformers attends it.
"""

import dataclasses
import json

import numpy as np
import pytest

from conftest import minilm_dir

from kbert import build_transformer_model
from kbert.models.config import bundled_config_path
from kbert.models.modernbert.config import GLOBAL, LOCAL
from kbert.models.registry import resolve
from kbert.tokenizers.tokenizer_json import TokenizerJson
from kbert.tokenizers.wordpiece import NEGATIVE_PADDING, pad_batch

HUB_CONFIGS = ["all_mpnet_base_v2", "deberta_v3_base", "distilbert_base_uncased", "eurobert_210m", "gte_base_en_v1_5",
               "gte_multilingual_base", "jina_embeddings_v3", "mmbert_base", "modernbert_base", "nomic_embed_text_v1_5"]


def small(name):
    """The bundled config `name` at a few thousand weights a layer, its vocabulary and special ids as released."""
    family, config = resolve(bundled_config_path(name))
    sizes = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32,
             "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "initializer_range": 0.3}
    own = {"layer_types": (GLOBAL, LOCAL), "local_attention": 4} if family.name == "modernbert" else \
        {"num_key_value_heads": 1} if family.name == "eurobert" else {}
    return dataclasses.replace(config, **sizes, **own)


def framing(config):
    """The ids its tokenizer puts around a text: bos (or cls) first, eos (or sep) last, as the config names them."""
    first = getattr(config, "bos_token_id", None)
    last = getattr(config, "eos_token_id", None)
    return ([] if first is None else [first]), ([] if last is None else [last])


def padding_of(config) -> "int | str":
    """What a tokenizer with these ids pads with (`TokenizerJson.padding`): the pad id, unless texts hold it."""
    first, last = framing(config)
    return NEGATIVE_PADDING if config.pad_token_id in first + last else config.pad_token_id


@pytest.mark.parametrize("name", HUB_CONFIGS)
def test_a_text_alone_is_the_same_text_in_a_padded_batch_and_none_of_its_tokens_is_hidden(name):
    config = small(name)
    padding = padding_of(config)
    model = build_transformer_model(config, padding=padding)
    first, last = framing(config)
    rng = np.random.default_rng(0)
    words = [i for i in rng.integers(5, 2000, 40) if i != config.pad_token_id]
    texts = [first + words[:6] + last, first + words[6:20] + last]
    pad = -1 - (config.pad_token_id or 0) if padding == NEGATIVE_PADDING else padding
    ids, segments = pad_batch([(text, [0] * len(text)) for text in texts], pad)
    batch = np.asarray(model([ids, segments]))  # eager calls: no step compiled for each of three shapes
    for row, text in enumerate(texts):
        alone = np.asarray(model([np.array([text]), np.zeros((1, len(text)), np.int32)]))[0]
        np.testing.assert_allclose(batch[row, :len(text)], alone, atol=2e-5, err_msg=f"{name}: text {row}")
    mask = model.get_layer("Embedding-Token").compute_mask(ids)
    real = np.arange(ids.shape[1])[None] < np.array([[len(text)] for text in texts])
    np.testing.assert_array_equal(np.asarray(mask), real, err_msg=f"{name}: hidden positions are not the padding")


def test_eurobert_pads_by_length_where_its_pad_token_ends_every_text():
    """EuroBERT's config makes `<|end_of_text|>` (128001) both its pad and its eos; padding by that id hid every
    text's last token from attention and pooling."""
    config = small("eurobert_210m")
    assert config.pad_token_id == config.eos_token_id == 128001 and padding_of(config) == NEGATIVE_PADDING
    by_id = build_transformer_model(config)  # the config's pad id: the real end of text hidden
    text = np.array([[128000, 17, 18, 19, 128001]])
    assert np.asarray(by_id.get_layer("Embedding-Token").compute_mask(text)).tolist() == [[True] * 4 + [False]]
    by_length = build_transformer_model(config, padding=NEGATIVE_PADDING)
    assert np.asarray(by_length.get_layer("Embedding-Token").compute_mask(text)).all()


def test_alibabas_config_without_a_pad_id_is_padded_as_its_vocabulary_pads():
    """gte-*-v1.5's `new` config sets no pad_token_id (kbert's GTE default: 1); its BERT vocabulary pads with
    [PAD] 0. Built for the tokenizer, 0 is hidden: a text's vector no longer depends on its batch."""
    config = resolve({"model_type": "new", "vocab_size": 30528, "hidden_size": 16, "num_hidden_layers": 2,
                      "num_attention_heads": 2, "intermediate_size": 32, "type_vocab_size": 0,
                      "max_position_embeddings": 64, "initializer_range": 0.3})[1]
    assert config.pad_token_id == 1
    texts = [[101, 7, 8, 102], [101, 7, 8, 9, 10, 11, 102]]
    ids, segments = pad_batch([(text, [0] * len(text)) for text in texts], 0)
    for padding, same in ((None, False), (0, True)):
        model = build_transformer_model(config, padding=padding)
        alone = np.asarray(model([np.array(texts[:1]), np.zeros((1, 4), np.int32)]))[0]
        in_batch = np.asarray(model([ids, segments]))[0, :4]
        assert np.allclose(alone, in_batch, atol=2e-5) == same, padding


def eurobert_tokenizer_folder(folder, vocab_size):
    """A tokenizer.json framed as EuroBERT's (`<|begin_of_text|> $A <|end_of_text|>`), its tokenizer_config.json
    naming `<|end_of_text|>` the pad token, over a vocabulary of `vocab_size` with the specials at 128000-128002
    where they fit, else at its end."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    words = {f"w{index}": index for index in range(vocab_size - 3)}
    specials = {"<|begin_of_text|>": vocab_size - 3, "<|end_of_text|>": vocab_size - 2, "<|mask|>": vocab_size - 1}
    backend = Tokenizer(models.WordLevel({**words, **specials}, unk_token="w0"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A <|end_of_text|>", pair="<|begin_of_text|> $A <|end_of_text|> $B <|end_of_text|>",
        special_tokens=[(token, index) for token, index in specials.items() if token != "<|mask|>"])
    folder.mkdir(exist_ok=True)
    backend.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
        "pad_token": "<|end_of_text|>", "mask_token": "<|mask|>"}))
    return specials


def test_a_tokenizer_whose_pad_token_ends_every_text_pads_with_negative_ids(tmp_path):
    specials = eurobert_tokenizer_folder(tmp_path, 64)
    tokenizer = TokenizerJson(tmp_path / "tokenizer.json")
    end = specials["<|end_of_text|>"]
    assert (tokenizer.pad_token_id, tokenizer.pad_id, tokenizer.padding) == (end, -1 - end, NEGATIVE_PADDING)
    ids, _ = tokenizer.encode_batch(["w5 w6", "w7"])
    assert ids.tolist() == [[61, 5, 6, end], [61, 7, end, -1 - end]]


@pytest.mark.parity
def test_eurobert_with_its_own_framing_gives_transformers_outputs(tmp_path):
    """The tokenizer's batch through kbert's EuroBERT (built for the tokenizer's padding) is transformers' under the
    attention mask the tokenizer gives it, the ending `<|end_of_text|>` attended."""
    torch = pytest.importorskip("torch", reason="the parity extra (transformers, torch) is not installed")
    transformers = pytest.importorskip("transformers", reason="the parity extra is not installed")
    from kbert.checkpoints.hf import load_hf_weights

    vocab = 64
    specials = eurobert_tokenizer_folder(tmp_path, vocab)
    torch.manual_seed(0)
    hf_config = transformers.EuroBertConfig(
        vocab_size=vocab, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=32, max_position_embeddings=64, initializer_range=0.3, pad_token_id=specials["<|end_of_text|>"],
        bos_token_id=specials["<|begin_of_text|>"], eos_token_id=specials["<|end_of_text|>"],
        mask_token_id=specials["<|mask|>"])
    transformers.EuroBertModel(hf_config).eval().save_pretrained(tmp_path)
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    texts = ["w5 w6 w9 w10", "w7"]
    encoded = theirs(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = transformers.AutoModel.from_pretrained(str(tmp_path)).eval()(**encoded).last_hidden_state.numpy()
    real = encoded["attention_mask"].numpy().astype(bool)
    assert real.sum(1).tolist() == [6, 3]  # the ending <|end_of_text|> is a real token to transformers
    tokenizer = TokenizerJson(tmp_path / "tokenizer.json")
    model = build_transformer_model(tmp_path / "config.json", padding=tokenizer.padding)
    load_hf_weights(model, tmp_path)
    ids, segments = tokenizer.encode_batch(texts)
    np.testing.assert_array_equal(np.where(ids < 0, specials["<|end_of_text|>"], ids), encoded["input_ids"].numpy())
    np.testing.assert_allclose(model.predict_on_batch([ids, segments])[real], expected[real], atol=1e-5)


PAD_TYPED = ["hello [PAD] world", "a longer query about [PAD] tokens [PAD] [PAD] typed in it"]


def test_a_pad_token_typed_in_a_text_is_a_real_token():
    """all-MiniLM's `tokenizer.json` reads `[PAD]` in a text as id 0, its pad token: the model built for the
    tokenizer hides the batch's padding only, so the typed `[PAD]` is attended and the text's vector depends on
    it (before, id 0 was hidden wherever it stood: the vector was that of the text without it)."""
    from kbert.embeddings.embedder import Embedder

    tokenizer = TokenizerJson(minilm_dir() / "tokenizer.json")
    ids, _ = tokenizer.encode_batch(PAD_TYPED)
    assert tokenizer.pad_token_id == 0 and ids[0, :5].tolist() == [101, 7592, 0, 2088, 102]
    assert (ids[0, 5:] == -1).all()  # the padding: -1 - [PAD]
    model = build_transformer_model(minilm_dir() / "config.json", padding=tokenizer.padding)
    mask = np.asarray(model.get_layer("Embedding-Token").compute_mask(ids))
    np.testing.assert_array_equal(mask, ids >= 0)
    embedder = Embedder.load(minilm_dir())
    typed, without = embedder.encode(["hello [PAD] world", "hello world"])
    assert float(typed @ without) < 0.99


@pytest.mark.parity
def test_a_pad_token_typed_in_a_text_embeds_as_sentence_transformers_embeds_it():
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="the parity extra is not installed")
    from kbert.embeddings.embedder import Embedder

    reference = sentence_transformers.SentenceTransformer(str(minilm_dir()), device="cpu").encode(PAD_TYPED)
    np.testing.assert_allclose(Embedder.load(minilm_dir()).encode(PAD_TYPED), reference, atol=1e-5)
