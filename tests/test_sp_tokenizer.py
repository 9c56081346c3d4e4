"""SpTokenizer: a SentencePiece model trained here on the repository's Chinese text (nothing downloaded)."""

import io
import unicodedata

import keras
import numpy as np
import pytest

from conftest import shared_path
from kbert import KbertError, SpTokenizer, build_transformer_model, generate


@pytest.fixture(scope="module")
def sp_model(tmp_path_factory):
    """A 4,000-piece unigram model with T5's special ids: padding 0, end 1, unknown 2."""
    import sentencepiece

    lines = [line.split("\t")[0] for line in
             shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()]
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines[:3000]), model_writer=model, vocab_size=4000, pad_id=0, eos_id=1, unk_id=2,
        bos_id=-1, character_coverage=0.9995, minloglevel=2)
    path = tmp_path_factory.mktemp("sp") / "spiece.model"
    path.write_bytes(model.getvalue())
    return path


def test_t5_framing_and_special_ids(sp_model):
    tokenizer = SpTokenizer(sp_model)
    assert (tokenizer._token_pad_id, tokenizer._token_end_id, tokenizer._token_unk_id) == (0, 1, 2)
    assert tokenizer._token_start_id is None and tokenizer.vocab_size == tokenizer._vocab_size == 4000
    text = "这本书写得很好，值得一看"
    ids, segments = tokenizer.encode(text)
    pieces = tokenizer.sp_model.encode(text)
    assert ids == pieces + [1] and segments == [0] * len(ids)
    assert tokenizer.decode(ids) == unicodedata.normalize("NFKC", text)  # SentencePiece's normalisation: "，" -> ","
    assert tokenizer.tokenize(text) == tokenizer.sp_model.encode(text, out_type=str) + ["</s>"]
    assert tokenizer.tokens_to_ids(tokenizer.ids_to_tokens(ids)) == ids


def test_pairs_and_truncation_follow_bert4keras(sp_model):
    tokenizer = SpTokenizer(sp_model, token_start="</s>")  # any piece the model has can open the text
    first, second = "质量很好", "价格太贵了，不会再买"
    a, b = tokenizer.sp_model.encode(first), tokenizer.sp_model.encode(second)
    ids, segments = tokenizer.encode(first, second)
    assert ids == [1] + a + [1] + b + [1]
    assert segments == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    # maxlen: the longer text loses pieces from its end; the special tokens stay.
    cut, _ = tokenizer.encode(first, second, maxlen=len(ids) - 2)
    assert len(cut) == len(ids) - 2 and cut[-1] == 1
    assert [row[0] for row in tokenizer.encode_all([first, second], [second, None])] == \
        [ids, tokenizer.encode(second)[0]]


def test_clear_errors(sp_model, tmp_path):
    with pytest.raises(KbertError, match=r"spiece.model: the SentencePiece model has no piece '\[CLS\]' "
                                         r"\(token_start\); pass token_start=None"):
        SpTokenizer(sp_model, token_start="[CLS]")
    broken = tmp_path / "broken.model"
    broken.write_bytes(b"not a model")
    with pytest.raises(KbertError, match="broken.model: cannot read a SentencePiece model"):
        SpTokenizer(broken)


def test_an_mt5_generates_text_its_tokenizer_decodes(sp_model):
    """mT5's recipe as bert4keras's script: the decoder starts at 0, the pad id, and ends at </s>."""
    tokenizer = SpTokenizer(sp_model)
    keras.utils.set_random_seed(3)
    config = {"vocab_size": tokenizer.vocab_size, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 4, "attention_head_size": 8, "intermediate_size": 64,
              "hidden_act": ["gelu", "linear"]}
    mt5 = build_transformer_model(config, model="mt5.1.1")
    sources = [tokenizer.encode(text)[0] for text in ("这家酒店很干净", "服务太差")]
    (first, second) = generate(mt5, sources, max_new_tokens=8, end_id=tokenizer._token_end_id, start_id=0)
    assert first == generate(mt5, sources[:1], max_new_tokens=8, end_id=1, start_id=0, use_cache=False)[0]
    text = tokenizer.decode(first)
    assert isinstance(text, str) and text == tokenizer.sp_model.decode(first)
    assert np.all(np.array(first + second) >= 3)  # neither padding nor the end nor unknown was generated


def test_mt5_seq2seq_from_the_command_line_on_a_sentencepiece_vocabulary(sp_model, tmp_path):
    """--vocab spiece.model: T5's framing (source </s>; the decoder starts at 0), kept in the model directory."""
    import json

    from conftest import kbert_in_process as kbert, write
    from kbert.tasks.seq2seq import Pair, encode_pairs, load_generator

    tokenizer = SpTokenizer(sp_model)
    (source, decoder), = encode_pairs(tokenizer, [Pair("质量很好", "好评", 1)], maxlen=32, encoder_decoder=True)[0]
    labels = encode_pairs(tokenizer, [Pair("质量很好", "好评", 1)], maxlen=32, encoder_decoder=True)[1][0]
    assert source == tokenizer.encode("质量很好")[0] and labels == tokenizer.encode("好评")[0]
    assert decoder == [0] + labels[:-1]

    lines = [line.split("\t") for line in
             shared_path("data", "sentiment", "sentiment.valid.data").read_text(encoding="utf-8").splitlines()[:120]]
    write(tmp_path, "train.tsv", "".join(f"{text}\t{'好评' if label == '1' else '差评'}\n" for text, label in lines))
    config = write(tmp_path, "mt5.json", json.dumps({
        "vocab_size": tokenizer.vocab_size, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
        "attention_head_size": 8, "intermediate_size": 64, "hidden_act": ["gelu", "linear"]}))
    out = tmp_path / "mt5"
    result = kbert("train", "--task", "seq2seq", "--model", "mt5.1.1", "--config", config, "--vocab", sp_model,
                   "--train", tmp_path / "train.tsv", "--epochs", "1", "--batch-size", "16", "--maxlen", "32",
                   "--out", out)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "spiece.model").read_bytes() == sp_model.read_bytes() and not (out / "vocab.txt").exists()
    loaded = load_generator(str(out))
    assert isinstance(loaded.tokenizer, SpTokenizer)
    sources = [text for text, _ in lines[:3]]
    prompts = [ids for ids, _ in tokenizer.encode_all(sources, maxlen=32)]
    expected = [tokenizer.decode(ids) for ids in generate(loaded.model, prompts, max_new_tokens=31, end_id=1,
                                                          start_id=0, use_cache=False)]
    result = kbert("predict", "--model", out, "--json", stdin="\n".join(sources))
    assert result.returncode == 0, result.stderr[-3000:]
    assert [json.loads(line)["target"] for line in result.stdout.splitlines()] == expected
    # Other tasks need WordPiece.
    result = kbert("train", "--config", "configs/bert_tiny.json", "--vocab", sp_model, "--train",
                   tmp_path / "train.tsv", "--maxlen", "32", "--out", tmp_path / "classifier")
    assert result.returncode == 2 and "a SentencePiece vocabulary is read for --task seq2seq with a T5" in result.stderr


def test_training_on_a_sentencepiece_model_without_a_padding_piece_is_refused(tmp_path):
    """Padding would take id 0, here <unk>, a real piece the model would hide: refused with the fix."""
    import sentencepiece

    from conftest import kbert_in_process as kbert, write

    lines = [line.split("\t")[0] for line in
             shared_path("data", "sentiment", "sentiment.train.data").read_text(encoding="utf-8").splitlines()]
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(  # SentencePiece's defaults: no <pad>
        sentence_iterator=iter(lines[:500]), model_writer=model, vocab_size=3000, character_coverage=0.99,
        minloglevel=2)
    path = write(tmp_path, "spiece.model", "")
    path.write_bytes(model.getvalue())
    assert not SpTokenizer(path).has_padding_piece
    write(tmp_path, "train.tsv", "质量很好\t好评\n")
    result = kbert("train", "--task", "seq2seq", "--model", "t5.1.1", "--config", "configs/t5_small_chinese.json",
                   "--vocab", path, "--train", tmp_path / "train.tsv", "--out", tmp_path / "out")
    assert result.returncode == 2
    assert "this SentencePiece model has no padding piece, so batches would be padded with id 0 ('<unk>')" \
        in result.stderr and not (tmp_path / "out").exists()
