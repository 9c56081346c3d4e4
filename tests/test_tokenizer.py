"""The tokenizer against Google's original BERT `FullTokenizer`.

The expected ids below were produced by Google's `tokenization.py` (from the
PyPI package bert-tensorflow 1.0.4) on the same vocabularies, and are written
out so that the tests need neither it nor TensorFlow 1.
"""

import unicodedata

import numpy as np
import pytest

from conftest import minilm_dir, shared_path
from kbert import KbertError, Tokenizer


@pytest.fixture(scope="module")
def chinese():
    return Tokenizer(shared_path("vocab", "chinese_vocab.txt"))


def test_mission_example(chinese):
    assert chinese.encode("语言模型") == ([101, 6427, 6241, 3563, 1798, 102], [0, 0, 0, 0, 0, 0])
    assert chinese.vocab_size == 21128


@pytest.mark.parametrize("text, expected", [
    ("今天天气不错，我们去公园散步吧！",
     [101, 791, 1921, 1921, 3698, 679, 7231, 8024, 2769, 812, 1343, 1062, 1736, 3141, 3635, 1416, 8013, 102]),
    ("BERT模型在2018年由Google发布。",
     [101, 8815, 8716, 3563, 1798, 1762, 8271, 2399, 4507, 8190, 1355, 2357, 511, 102]),
    ("Café naïve résumé Ångström",
     [101, 8377, 11469, 8857, 8847, 11442, 8505, 9064, 9726, 11343, 8175, 102]),
    ("Hello,world!!(test)-- a.b;c:d?\"quoted\" [x] {y} <z> 50%",
     [101, 8701, 117, 8572, 106, 106, 113, 10060, 114, 118, 118, 143, 119, 144, 132, 145, 131, 146, 136, 107, 10733, 8303, 107, 138, 166, 140, 169, 167, 171, 133, 168, 135, 8145, 110, 102]),
    ("zero\u200bwidth\u200d join\x00nul\x07bell\ttab\r\nnewline\ufeffbom",
     [101, 10397, 10958, 12672, 8199, 13269, 8277, 8171, 10086, 13110, 10476, 8343, 8762, 8820, 8175, 102]),
    ("我爱😀emoji🎉👍🏽",
     [101, 2769, 4263, 100, 102]),
    ("ＡＢＣ１２３，（全角）！",
     [101, 8051, 12641, 10675, 8939, 8929, 9089, 8024, 8020, 1059, 6235, 8021, 8013, 102]),
    ("日本語のテキスト 한국어 텍스트",
     [101, 3189, 3315, 6295, 561, 11903, 10781, 10579, 303, 10928, 9877, 13454, 13479, 11953, 13463, 13472, 301, 13473, 11953, 13462, 13482, 13467, 13482, 102]),
    ("  multiple   spaces\u3000ideographic space\u00a0nbsp ",
     [101, 13149, 10383, 9634, 8118, 11319, 10800, 12220, 8317, 9634, 8400, 102]),
])
def test_matches_google_full_tokenizer(chinese, text, expected):
    assert chinese.encode(text)[0] == expected


# Cases where the tokenizers library's own BERT normalizer differs from Google's rules;
# the ids are Google's FullTokenizer's (bert-tensorflow 1.0.4) on the Chinese vocab.
@pytest.mark.parametrize("text, lower_ids, cased_ids", [
    # Private-use characters are kept (as [UNK]), not deleted; inside a word the word is [UNK].
    ("我\ue139你", [2769, 100, 872], [2769, 100, 872]),
    ("我\U000F0001你", [2769, 100, 872], [2769, 100, 872]),
    ("ab\ue139cd", [100], [100]),
    # Google's CJK range U+2B820-U+2CEAF: one word per character.
    ("\U0002B820\U0002B821", [100, 100], [100, 100]),
    ("\U0002CEAF好", [100, 1962], [100, 1962]),
    # Python's lower-casing: a word-final capital sigma becomes ς (13395), σ (13396) inside.
    ("ΟΔΟΣ", [222, 13383, 13392, 13395], [100]),
    ("ΣΑΣ ΜΑΣ.", [226, 13380, 13395, 220, 13380, 13395, 119], [100, 100, 119]),
    ("ΑΣ.Β", [210, 13396, 119, 211], [100, 119, 100]),
    # Line separator: a word boundary (str.split), unlike other non-Zs characters.
    ("a\u2028b", [143, 144], [143, 144]),
    # A combining mark after a CJK character: stripped when lower-casing, else its own word.
    ("中\u0301文", [704, 3152], [704, 100, 3152]),
    # Format characters (Cf), here a language tag, are removed.
    ("\U000E0001标签", [3403, 5041], [3403, 5041]),
])
def test_matches_google_where_tokenizers_normalizer_does_not(text, lower_ids, cased_ids):
    vocab = shared_path("vocab", "chinese_vocab.txt")
    assert Tokenizer(vocab).encode(text)[0][1:-1] == lower_ids
    assert Tokenizer(vocab, do_lower_case=False).encode(text)[0][1:-1] == cased_ids


@pytest.mark.skipif(unicodedata.unidata_version < "14.0.0",
                    reason="these characters are new in Unicode 14 (Python 3.11)")
def test_follows_the_running_pythons_unicode_data(chinese):
    # Characters newer than the tokenizers build's Unicode tables, under Google's rules:
    # U+2E55 LEFT SQUARE BRACKET WITH STROKE is punctuation; U+0890 ARABIC POUND MARK ABOVE
    # is a format character, removed.
    assert chinese.encode("a\u2e55b")[0][1:-1] == [143, 100, 144]
    assert chinese.encode("a\u0890b")[0][1:-1] == [9386]


def test_long_words_become_unk(chinese):
    # Google's WordPiece gives up on words longer than 200 characters.
    assert chinese.encode("a" * 201)[0] == [101, 100, 102]
    assert chinese.encode("b" * 200)[0] == [101, 8638] + [10214] * 99 + [102]


def test_english_uncased_strips_accents():
    english = Tokenizer(minilm_dir() / "vocab.txt")
    assert english.tokenize("Café naïve résumé Ångström") == [
        "[CLS]", "cafe", "naive", "resume", "ang", "##strom", "[SEP]"]
    assert english.encode("The quick brown fox can't jump 32.5 ft!")[0] == [
        101, 1996, 4248, 2829, 4419, 2064, 1005, 1056, 5376, 3590, 1012, 1019, 3027, 999, 102]
    assert english.encode("unbelievably hyperparameterization")[0] == [
        101, 4895, 8671, 2666, 3567, 6321, 23760, 28689, 22828, 3989, 102]


def test_cased_keeps_accents():
    cased = Tokenizer(shared_path("vocab", "chinese_vocab.txt"), do_lower_case=False)
    assert cased.encode("Café Résumé")[0] == [101, 100, 100, 102]


def test_pair_truncation_is_longest_first_from_the_end(chinese):
    ids, segments = chinese.encode("今天天气很好", "我们去公园玩吧", maxlen=10)
    assert ids == [101, 791, 1921, 1921, 102, 2769, 812, 1343, 1062, 102]
    assert segments == [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    ids, _ = chinese.encode("今天天气很好", maxlen=5)
    assert ids == [101, 791, 1921, 1921, 102]


def test_batch_is_padded_with_zeros(chinese):
    tokens, segments = chinese.encode_batch(["语言模型", "好"], ["很好", "不"])
    assert tokens.dtype == np.int32 and tokens.shape == (2, 9)
    assert tokens.tolist() == [[101, 6427, 6241, 3563, 1798, 102, 2523, 1962, 102],
                               [101, 1962, 102, 679, 102, 0, 0, 0, 0]]
    assert segments.tolist() == [[0, 0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 0, 0, 0, 0]]


def test_ids_tokens_and_decode(chinese):
    assert chinese.token_to_id("[MASK]") == 103 and chinese.id_to_token(6427) == "语"
    assert chinese.token_to_id("never-seen-token") == 100
    assert chinese.tokenize("语言") == ["[CLS]", "语", "言", "[SEP]"]
    english = Tokenizer(minilm_dir() / "vocab.txt")
    assert english.decode(english.encode("unbelievably good")[0]) == "unbelievably good"


def test_bad_vocab_files(tmp_path):
    with pytest.raises(KbertError, match="missing.txt: vocabulary file not found"):
        Tokenizer(tmp_path / "missing.txt")
    (tmp_path / "bad.txt").write_text("hello\nworld\n")
    with pytest.raises(KbertError, match=r"bad.txt: the vocabulary lacks \[CLS\], \[SEP\], \[UNK\]"):
        Tokenizer(tmp_path / "bad.txt")


@pytest.mark.parametrize("names, second", [(None, 1), (["input_ids", "token_type_ids", "attention_mask"], 1),
                                            (["input_ids", "attention_mask"], 0)])
def test_a_folder_whose_tokenizer_gives_no_token_types_feeds_segment_0(tmp_path, names, second):
    """transformers feeds `token_type_ids` only where the folder's tokenizer_config.json lists them (XLM-R's,
    Jina's and mGTE's do not: a pair's second text is segment 0 for their one-segment models)."""
    import json
    import shutil

    from kbert.tokenizers.tokenizer_json import TokenizerJson

    shutil.copy(minilm_dir() / "tokenizer.json", tmp_path / "tokenizer.json")
    if names is not None:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_input_names": names}))
    ids, segments = TokenizerJson(tmp_path / "tokenizer.json").encode("a question", "an answer")
    assert segments == [0] * 4 + [second] * 3 and len(ids) == 7


def test_a_tokenizer_config_that_is_not_json_is_named(tmp_path):
    """It names the pad token the batches are padded with: read once, and refused by name where unreadable."""
    import shutil

    from kbert.tokenizers.tokenizer_json import TokenizerJson

    shutil.copy(minilm_dir() / "tokenizer.json", tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(KbertError, match=r"tokenizer_config.json: not JSON \("):
        TokenizerJson(tmp_path / "tokenizer.json")
