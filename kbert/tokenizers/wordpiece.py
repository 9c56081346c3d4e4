"""`Tokenizer`: BERT's WordPiece tokenizer with bert4keras's `encode`.

Its ids equal Google's `FullTokenizer` (the original BERT release) on every
code point, under the running Python's Unicode data. The two steps:

1. `normalize` (Python's C-level string methods): control and format
   characters (Cc, Cf), NUL and U+FFFD removed, whitespace made spaces; with
   lower-casing, `str.lower` (so a word-final capital sigma becomes `ς`), NFD
   and combining marks dropped. Private-use and unassigned characters are
   kept, and become `[UNK]` unless the vocabulary has them.
2. The `tokenizers` library: words split on whitespace, every CJK character
   (Google's ranges, U+2B820-U+2CEAF included) and punctuation character a
   word of its own, then WordPiece.

`tokenizers`' own BERT normalizer differs from Google's on private-use
characters, on that CJK range, on final sigma and on characters newer than its
Unicode tables; that is why kbert does step 1 itself.

kbert adds bert4keras's conventions: `encode` returns
`(token_ids, segment_ids)` and truncates a pair longest-first, from the end,
to `maxlen` tokens in all.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import unicodedata
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from kbert.errors import KbertError, first_line

CLS, SEP, PAD, UNK, MASK = "[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"

# Google's _is_chinese_char: the CJK Unified Ideographs blocks and their
# extensions and compatibility blocks (not Japanese kana or Korean hangul).
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


class _CharacterClasses:
    """Google's character tests, as translate tables and `tokenizers` patterns.

    Computed once per process by looking at every code point with the running
    Python's `unicodedata`, as Google's code does one character at a time. The
    patterns name the code points explicitly, so the `tokenizers` library's own
    Unicode tables play no part.
    """

    def __init__(self) -> None:
        removed, whitespace, spaces, punctuation, marks = [], [], [], [], []
        for code in range(sys.maxunicode + 1):
            char = chr(code)
            category = unicodedata.category(char)
            if char in " \t\n\r" or category == "Zs":
                whitespace.append(code)
            elif code in (0, 0xFFFD) or category in ("Cc", "Cf"):
                removed.append(code)
            if char.isspace():  # what Google's str.split() splits on
                spaces.append(code)
            if category.startswith("P") or 33 <= code <= 47 or 58 <= code <= 64 \
                    or 91 <= code <= 96 or 123 <= code <= 126:
                punctuation.append(code)
            if category == "Mn":
                marks.append(code)
        self.punctuation = frozenset(map(chr, punctuation))
        self.clean = {**dict.fromkeys(removed), **dict.fromkeys(whitespace, " ")}
        self.marks = dict.fromkeys(marks)
        self.spaces = f"[{_pattern_class(_runs(spaces))}]+"
        self.single_character_words = f"[{_pattern_class(_CJK_RANGES)}{_pattern_class(_runs(punctuation))}]"


def _runs(codes: List[int]) -> List[Tuple[int, int]]:
    """Sorted code points as (first, last) runs."""
    runs: List[Tuple[int, int]] = []
    for code in codes:
        if runs and runs[-1][1] == code - 1:
            runs[-1] = (runs[-1][0], code)
        else:
            runs.append((code, code))
    return runs


def _pattern_class(runs) -> str:
    """The inside of a regular-expression class of `tokenizers` (Oniguruma) for code point runs."""
    return "".join(f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in runs)


@functools.lru_cache(maxsize=None)
def _character_classes() -> _CharacterClasses:
    return _CharacterClasses()


def is_cjk_character(char: str) -> bool:
    """Whether `char` is in Google's (and bert4keras's) CJK ranges."""
    code = ord(char)
    return any(first <= code <= last for first, last in _CJK_RANGES)


def is_punctuation(char: str) -> bool:
    """Google's (and bert4keras's) punctuation: ASCII symbols and Unicode category P*."""
    return char in _character_classes().punctuation


def normalize(text: str, do_lower_case: bool = True) -> str:
    """The text as Google's `BasicTokenizer` sees it before splitting words.

    Control and format characters, NUL and U+FFFD removed, whitespace made
    spaces; with `do_lower_case`, `str.lower` then accents stripped (NFD, marks
    dropped). Google lower-cases word by word; the whole text gives the same
    result, since whitespace is neither cased nor case-ignorable and so ends a
    final sigma's context, as CJK characters and the text's ends do.

    Example:
    >>> normalize("Héllo\\u200b ΟΔΟΣ\\t!")
    'hello οδος !'
    """
    classes = _character_classes()
    text = text.translate(classes.clean)
    if do_lower_case:
        text = unicodedata.normalize("NFD", text.lower()).translate(classes.marks)
    return text


def _pre_tokenizer():
    """Google's word split in `tokenizers`: on whitespace, then every CJK and punctuation character alone."""
    from tokenizers import Regex, pre_tokenizers

    classes = _character_classes()
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(classes.spaces), "removed"),
        pre_tokenizers.Split(Regex(classes.single_character_words), "isolated"),
    ])


class Tokenizer:
    """WordPiece tokenizer for a BERT `vocab.txt`, equal to Google's `FullTokenizer`.

    Its pieces continue a word with `##` (`wordpiece`, as a `TokenizerJson` says of its own).

    Args:
        vocab: the vocabulary: the path of a `vocab.txt` (one token a line; a
            token's id is its line number, from 0), of a Hugging Face
            `tokenizer.json` (WordPiece), or of a model directory holding
            either; or a `{token: id}` dict as bert4keras's `load_vocab` returns.
        do_lower_case: lower-case and strip accents first (True for uncased
            and Chinese models, False for cased ones).

    Example:
    >>> vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "语": 4, "言": 5, "model": 6}
    >>> tokenizer = Tokenizer(vocab)
    >>> tokenizer.encode("语言 Model")
    ([2, 4, 5, 6, 3], [0, 0, 0, 0, 0])
    >>> tokenizer.tokenize("语言?")  # a word with no vocabulary pieces keeps its text...
    ['[CLS]', '语', '言', '?', '[SEP]']
    >>> tokenizer.encode("语言?")[0]  # ...and has [UNK]'s id
    [2, 4, 5, 1, 3]
    >>> tokenizer._token_start_id, tokenizer._token_end_id, tokenizer._vocab_size  # bert4keras's names
    (2, 3, 7)
    """

    wordpiece = True

    def __init__(self, vocab: "str | os.PathLike[str] | Mapping[str, int]", do_lower_case: bool = True):
        from tokenizers import Tokenizer as _Backend
        from tokenizers import models

        self.do_lower_case = do_lower_case
        self.vocab = _check_vocab(dict(vocab), "vocab") if isinstance(vocab, Mapping) \
            else _read_vocab(os.fspath(vocab))
        self._id_to_token = {index: token for token, index in self.vocab.items()}
        # Google's WordPiece gives up on words over 200 characters (HF's default is 100).
        backend = _Backend(models.WordPiece(self.vocab, unk_token=UNK, max_input_chars_per_word=200))
        backend.pre_tokenizer = _pre_tokenizer()
        self._backend = backend
        # [PAD] pads batches, and the model hides it: no text holds it (`[PAD]` typed in a text is `[`, `pad`, `]`).
        self.cls_id, self.sep_id, self.pad_id = (self.vocab[CLS], self.vocab[SEP],
                                                 self.vocab.get(PAD, 0))
        self.pad_token_id = self.pad_id
        self.unk_id, self.mask_id = self.vocab[UNK], self.token_to_id(MASK)  # no [MASK]: [UNK]'s, as ever
        # bert4keras's names, which scripts written for it read: `_token_<name>` for each special
        # token, `_token_<name>_id` for those the vocabulary has, and `_vocab_size`.
        self._token_pad, self._token_unk, self._token_mask, self._token_start, self._token_end = \
            PAD, UNK, MASK, CLS, SEP
        for name in ("pad", "unk", "mask", "start", "end"):
            token = getattr(self, f"_token_{name}")
            if token in self.vocab:
                setattr(self, f"_token_{name}_id", self.vocab[token])
        self._vocab_size = self.vocab_size

    @property
    def vocab_size(self) -> int:
        return len(self._id_to_token)

    def tokenize(self, text: str, maxlen: Optional[int] = None) -> List[str]:
        """The tokens of `text` between `[CLS]` and `[SEP]`, as bert4keras gives them.

        A word that WordPiece cannot cut into vocabulary pieces stays whole as
        its token (its id is `[UNK]`'s), so `rematch` can place it in the text.
        With `maxlen`, tokens are dropped from the end to fit.
        """
        tokens = self._tokens([text])[0][0]
        if maxlen is not None:
            _truncate_longest_first([tokens], maxlen - 2)
        return [CLS] + tokens + [SEP]

    def encode(self, first: str, second: Optional[str] = None,
               maxlen: Optional[int] = None) -> Tuple[List[int], List[int]]:
        """`(token_ids, segment_ids)` of `[CLS] first [SEP] (second [SEP])`.

        With `maxlen`, tokens are dropped from the end of the longer text until
        the whole fits, counting `[CLS]` and the first `[SEP]` with the first
        text and the second `[SEP]` with the second (ties: the first text), as
        bert4keras's `truncate_sequences` does.
        """
        pieces = [self._wordpiece_ids([first])[0]]
        if second is not None:
            pieces.append(self._wordpiece_ids([second])[0])
        return self._assemble(pieces, maxlen)

    def encode_all(self, first: Sequence[str], second: Optional[Sequence[Optional[str]]] = None,
                   maxlen: Optional[int] = None) -> List[Tuple[List[int], List[int]]]:
        """`encode` for many texts (or pairs; a `None` second text means none), unpadded.

        The words are cut into WordPiece tokens together, in parallel, by `tokenizers`.
        """
        firsts = self._wordpiece_ids(first)
        seconds: List[Optional[List[int]]] = [None] * len(firsts)
        if second is not None:
            present = [i for i, text in enumerate(second) if text is not None]
            for i, ids in zip(present, self._wordpiece_ids([second[i] for i in present])):
                seconds[i] = ids
        return [self._assemble([a] if b is None else [a, b], maxlen) for a, b in zip(firsts, seconds)]

    @property
    def padding(self) -> int:
        """What a model built for this tokenizer's batches hides (`build_transformer_model(padding=)`): `[PAD]`'s
        id, which no text holds."""
        return self.pad_id

    def encode_batch(self, first: Sequence[str], second: Optional[Sequence[Optional[str]]] = None,
                     maxlen: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
        """Encodes many texts (or pairs) at once, padded with 0 to the longest.

        Returns int32 arrays `token_ids` and `segment_ids` of shape `[n, length]`.
        """
        return pad_batch(self.encode_all(first, second, maxlen), self.pad_id)

    def decode(self, ids: Sequence[int], tokens: Optional[Sequence[str]] = None,
               skip_special_tokens: bool = True) -> str:
        """Text of `ids` (or of `tokens`), joined as bert4keras joins it.

        Bracketed special tokens (`[CLS]`, `[SEP]`, `[UNK]`, ...) are left out (kept as words where not
        `skip_special_tokens`);
        `##` pieces join the previous token; CJK characters join without
        spaces; other tokens are separated by one space, except after
        punctuation that opens or joins (`/`, `=`, `(`, CJK punctuation, ...)
        and inside decimal numbers.

        Example:
        >>> vocab = {"[CLS]": 0, "[SEP]": 1, "[UNK]": 2, "un": 3, "##aff": 4, "##able": 5, "3": 6, ".": 7, "5": 8}
        >>> Tokenizer(vocab).decode([0, 3, 4, 5, 6, 7, 8, 1])
        'unaffable 3.5'
        """
        tokens = list(tokens) if tokens is not None else self.ids_to_tokens(ids)
        tokens = [token for token in tokens if not (skip_special_tokens and _is_bracketed(token))]
        text = ""
        for index, token in enumerate(tokens):
            if token.startswith("##"):
                text += token[2:]
            elif len(token) == 1 and is_cjk_character(token):
                text += token
            elif len(token) == 1 and is_punctuation(token):
                text += token + " "
            elif index > 0 and text and is_cjk_character(text[-1]):
                text += token
            else:
                text += " " + token
        text = re.sub(" +", " ", text)
        text = re.sub(r"' (re|m|s|t|ve|d|ll) ", r"'\1 ", text)
        text = re.sub(f"([{re.escape(_JOINING_PUNCTUATION)}]) ", r"\1", text)
        text = re.sub(r"(\d\.) (\d)", r"\1\2", text)
        return text.strip()

    def offsets(self, texts: Sequence[str]) -> List[List[Tuple[int, int]]]:
        """For each text, the `(start, end)` characters of the text that each token covers.

        Tokens as `encode` makes them, without `[CLS]`/`[SEP]`: `text[start:end]`
        is what a token came from (a `##` piece covers its part of the word).
        The spans come from the `tokenizers` library's offset mapping, in one
        batch. They agree with `rematch` except after a character that
        lower-cases to two (`İ`), where bert4keras's `rematch` counts one too far.

        Example:
        >>> tokenizer = Tokenizer({"[CLS]": 0, "[SEP]": 1, "[UNK]": 2, "cafe": 3, "语": 4})
        >>> tokenizer.offsets(["Café 语", "语\\u200b语"])
        [[(0, 4), (5, 6)], [(0, 1), (2, 3)]]
        """
        return [spans for _, spans in self.ids_and_offsets(texts)]

    def ids_and_offsets(self, texts: Sequence[str]) -> List[Tuple[List[int], List[Tuple[int, int]]]]:
        """For each text, its token ids (no `[CLS]`/`[SEP]`) and their spans, as `offsets` gives them.

        Example:
        >>> Tokenizer({"[CLS]": 0, "[SEP]": 1, "[UNK]": 2, "cafe": 3, "语": 4}).ids_and_offsets(["Café 语"])
        [([3, 4], [(0, 4), (5, 6)])]
        """
        normalized = [normalize(text, self.do_lower_case) for text in texts]
        encoded = self._backend.encode_batch(normalized, add_special_tokens=False)
        result = []
        for text, encoding in zip(texts, encoded):
            if self._keeps_positions(text):
                result.append((encoding.ids, list(encoding.offsets)))
                continue
            positions = self._positions(text)
            result.append((encoding.ids, [(positions[start], positions[end - 1] + 1)
                                          for start, end in encoding.offsets]))
        return result

    def _keeps_positions(self, text: str) -> bool:
        """Whether `normalize` turns every character of `text` into exactly one character.

        Checked step by step (removal, lower-casing, NFD, mark stripping), since a
        removal and an expansion elsewhere could leave the length unchanged.
        """
        classes = _character_classes()
        cleaned = text.translate(classes.clean)
        if len(cleaned) != len(text):
            return False
        if not self.do_lower_case:
            return True
        lowered = cleaned.lower()
        return (len(lowered) == len(cleaned) and unicodedata.is_normalized("NFD", lowered)
                and len(lowered.translate(classes.marks)) == len(lowered))

    def _positions(self, text: str) -> List[int]:
        """For each character of the normalized text, the position in `text` it came from."""
        positions: List[int] = []
        for position, char in enumerate(text):
            positions += [position] * len(normalize(char, self.do_lower_case))
        return positions

    def rematch(self, text: str, tokens: Sequence[str]) -> List[List[int]]:
        """For each token, the positions in `text` of the characters it came from.

        As bert4keras's `rematch`: `[]` for bracketed special tokens; `##`
        marks are ignored. Use it to map predicted token spans back to text.

        Example:
        >>> tokenizer = Tokenizer({"[CLS]": 0, "[SEP]": 1, "[UNK]": 2, "cafe": 3, "语": 4})
        >>> tokens = tokenizer.tokenize("Café 语")
        >>> tokens, tokenizer.rematch("Café 语", tokens)
        (['[CLS]', 'cafe', '语', '[SEP]'], [[], [0, 1, 2, 3], [5], []])
        """
        if self.do_lower_case:
            text = text.lower()
        classes = _character_classes()
        normalized, positions = [], []
        for position, char in enumerate(text):
            if self.do_lower_case:
                char = unicodedata.normalize("NFD", char).translate(classes.marks)
            char = "".join(c for c in char if classes.clean.get(ord(c), c) is not None)
            normalized.append(char)
            positions += [position] * len(char)
        normalized_text, mapping, offset = "".join(normalized), [], 0
        for token in tokens:
            if _is_bracketed(token):
                mapping.append([])
                continue
            piece = token[2:] if token.startswith("##") else token
            start = normalized_text.index(piece, offset)
            offset = start + len(piece)
            mapping.append(positions[start:offset])
        return mapping

    def tokens_to_ids(self, tokens: Sequence[str]) -> List[int]:
        return [self.token_to_id(token) for token in tokens]

    def ids_to_tokens(self, ids: Sequence[int]) -> List[str]:
        return [self.id_to_token(index) for index in ids]

    def token_to_id(self, token: str) -> int:
        """The id of `token`, or that of `[UNK]`."""
        return self.vocab.get(token, self.vocab[UNK])

    def id_to_token(self, index: int) -> str:
        return self._id_to_token[int(index)]

    def split_words(self, text: str) -> List[str]:
        """The words of `text` before WordPiece, as Google's `BasicTokenizer` gives them.

        Example:
        >>> Tokenizer({"[CLS]": 0, "[SEP]": 1, "[UNK]": 2}).split_words("Héllo, 世界!")
        ['hello', ',', '世', '界', '!']
        """
        normalized = normalize(text, self.do_lower_case)
        return [word for word, _ in self._backend.pre_tokenizer.pre_tokenize_str(normalized)]

    def _wordpiece_ids(self, texts: Sequence[str]) -> List[List[int]]:
        return [ids for _, ids in self._tokens(texts)]

    def _tokens(self, texts: Sequence[str]) -> List[Tuple[List[str], List[int]]]:
        """Tokens and ids of each text (no special tokens); an unsplittable word keeps its text."""
        normalized = [normalize(text, self.do_lower_case) for text in texts]
        encoded = self._backend.encode_batch(normalized, add_special_tokens=False)
        unk = self.vocab[UNK]
        return [([text[start:end] if index == unk else token
                  for token, index, (start, end) in zip(encoding.tokens, encoding.ids, encoding.offsets)],
                 encoding.ids)
                for text, encoding in zip(normalized, encoded)]

    def _assemble(self, pieces: List[List[int]], maxlen: Optional[int]) -> Tuple[List[int], List[int]]:
        if maxlen is not None:
            _truncate_longest_first(pieces, maxlen - len(pieces) - 1)
        token_ids, segment_ids = [self.cls_id], [0]
        for segment, piece in enumerate(pieces):
            token_ids += piece + [self.sep_id]
            segment_ids += [segment] * (len(piece) + 1)
        return token_ids, segment_ids


#: A tokenizer's `padding` where its batches are padded with negative ids (`-1 - i`): `build_transformer_model`
#: then hides each position after a text, whatever token `i` is.
NEGATIVE_PADDING = "negative"


def pad_batch(encoded: Sequence[Tuple[List[int], ...]], pad_id: int = 0) -> Tuple[np.ndarray, ...]:
    """Pads rows of features, `(token_ids, segment_ids)` (and any more: the tokens a pooling counts), to one
    length: an int32 array per feature, the token ids padded with `pad_id`, the others with 0."""
    length = max(len(row[0]) for row in encoded)
    arrays = [np.full((len(encoded), length), pad_id if feature == 0 else 0, dtype=np.int32)
              for feature in range(len(encoded[0]))]
    for row, features in enumerate(encoded):
        for array, values in zip(arrays, features):
            array[row, : len(values)] = values
    return tuple(arrays)


def _truncate_longest_first(pieces: List[list], budget: int) -> None:
    """Pops from the end of the longest piece until all fit in `budget` (bert4keras's rule).

    The first piece is counted with one more special token than the others
    (`[CLS]` and its `[SEP]` against the second's `[SEP]`); ties go to the first.
    """
    if budget < 0:
        raise ValueError(f"maxlen is too small for {len(pieces)} text(s) and their special tokens")
    while sum(len(piece) for piece in pieces) > budget:
        longest = max(range(len(pieces)), key=lambda i: (len(pieces[i]) + (i == 0), -i))
        pieces[longest].pop()


def _is_bracketed(token: str) -> bool:
    """bert4keras's special tokens: `[CLS]`, `[SEP]`, `[UNK]`, `[unused1]`, ..."""
    return bool(token) and token[0] == "[" and token[-1] == "]"


# Punctuation after which bert4keras's decode adds no space: CJK punctuation, and + - / = { ( < [.
_JOINING_PUNCTUATION = (
    "\uff02\uff03\uff04\uff05\uff06\uff07\uff08\uff09\uff0a\uff0b\uff0c\uff0d\uff0f\uff1a\uff1b"
    "\uff1c\uff1d\uff1e\uff20\uff3b\uff3c\uff3d\uff3e\uff3f\uff40\uff5b\uff5c\uff5d\uff5e\uff5f"
    "\uff60\uff62\uff63\uff64\u3000\u3001\u3003\u3008\u3009\u300a\u300b\u300c\u300d\u300e\u300f"
    "\u3010\u3011\u3014\u3015\u3016\u3017\u3018\u3019\u301a\u301b\u301c\u301d\u301e\u301f\u3030"
    "\u303e\u303f\u2013\u2014\u2018\u2019\u201b\u201c\u201d\u201e\u201f\u2026\u2027\ufe4f\ufe51"
    "\ufe54\u00b7\uff01\uff1f\uff61\u3002" "+-/={(<[")


def _read_vocab(path: str) -> Dict[str, int]:
    """A `vocab.txt`, a Hugging Face `tokenizer.json` (WordPiece), or a model directory holding either."""
    if os.path.isdir(path):
        path = vocab_in_directory(path)
    if path.endswith(".json"):
        return _read_tokenizer_json(path)
    if path.endswith(".model"):
        raise KbertError(f"{path}: a SentencePiece model; read it with kbert.SpTokenizer (T5, mT5)")
    try:
        with open(path, encoding="utf-8") as handle:
            tokens = [line.rstrip("\r\n") for line in handle]
    except FileNotFoundError:
        raise KbertError(f"{path}: vocabulary file not found") from None
    except UnicodeDecodeError as error:
        raise KbertError(f"{path}: not a UTF-8 text file ({error.reason} at byte {error.start})") from None
    while tokens and not tokens[-1].strip():
        tokens.pop()
    # As Google's load_vocab: tokens stripped, a repeated token keeps its last id.
    return _check_vocab({token.strip(): index for index, token in enumerate(tokens)}, path)


# A model directory's vocabulary, by preference: BERT's, then Hugging Face's, then the SentencePiece
# model of Google's T5 releases and Hugging Face's T5 directories.
SENTENCEPIECE_NAME = "spiece.model"
VOCABULARY_NAMES = ("vocab.txt", "tokenizer.json", SENTENCEPIECE_NAME)


def vocab_in_directory(directory: str) -> str:
    """The vocabulary file of a model directory (kbert's, Google's or Hugging Face's).

    >>> import tempfile, os
    >>> directory = tempfile.mkdtemp()
    >>> _ = open(os.path.join(directory, "spiece.model"), "wb").write(b"")
    >>> os.path.basename(vocab_in_directory(directory))
    'spiece.model'
    """
    for name in VOCABULARY_NAMES:
        candidate = os.path.join(directory, name)
        if os.path.exists(candidate):
            return candidate
    raise KbertError(f"{directory}: no {', '.join(VOCABULARY_NAMES)} in this directory; pass the vocabulary "
                     "file itself")


def _read_tokenizer_json(path: str) -> Dict[str, int]:
    """The WordPiece vocabulary of a Hugging Face `tokenizer.json`."""
    try:
        with open(path, encoding="utf-8") as handle:
            model = json.load(handle).get("model") or {}
    except FileNotFoundError:
        raise KbertError(f"{path}: vocabulary file not found") from None
    except (ValueError, AttributeError) as error:
        raise KbertError(f"{path}: not a Hugging Face tokenizer.json ({first_line(error)})") from None
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise KbertError(f"{path}: a {model.get('type') or 'non-WordPiece'} tokenizer; kbert's Tokenizer reads "
                         "WordPiece vocabularies (BERT's), and SpTokenizer SentencePiece .model files")
    return _check_vocab(dict(model["vocab"]), path)


def _check_vocab(vocab: Dict[str, int], source: str) -> Dict[str, int]:
    missing = [t for t in (CLS, SEP, UNK) if t not in vocab]
    if missing:
        raise KbertError(f"{source}: the vocabulary lacks {', '.join(missing)}; is this a BERT vocab.txt?")
    return vocab
