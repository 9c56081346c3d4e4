"""`Tokenizer`: BERT's WordPiece tokenizer with bert4keras's `encode`.

The WordPiece model, BERT's normalizer (clean-up, CJK spacing, lower-casing
and accent stripping) and pre-tokenizer come from the `tokenizers` library,
which reproduces Google's `FullTokenizer`. kbert adds only bert4keras's
conventions: `encode` returns `(token_ids, segment_ids)` and truncates a
pair longest-first, from the end, to `maxlen` tokens in all.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbert.errors import KbertError

CLS, SEP, PAD, UNK, MASK = "[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"


class Tokenizer:
    """WordPiece tokenizer for a BERT `vocab.txt`.

    Args:
        vocab_path: the vocabulary, one token a line; a token's id is its line
            number, from 0.
        do_lower_case: lower-case and strip accents first (True for uncased
            and Chinese models, False for cased ones).

    Example:
    >>> tokenizer = Tokenizer("chinese_L-12_H-768_A-12/vocab.txt")
    >>> tokenizer.encode("语言模型")
    ([101, 6427, 6241, 3563, 1798, 102], [0, 0, 0, 0, 0, 0])
    """

    def __init__(self, vocab_path: "str | os.PathLike[str]", do_lower_case: bool = True):
        from tokenizers import Tokenizer as _Backend
        from tokenizers import decoders, models, normalizers, pre_tokenizers

        self.vocab_path = os.fspath(vocab_path)
        self.do_lower_case = do_lower_case
        self.vocab = _read_vocab(self.vocab_path)
        self._id_to_token = {index: token for token, index in self.vocab.items()}
        backend = _Backend(models.WordPiece(self.vocab, unk_token=UNK, max_input_chars_per_word=200))
        backend.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=do_lower_case,
            lowercase=do_lower_case)
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        backend.decoder = decoders.WordPiece(prefix="##")
        self._backend = backend
        self.cls_id, self.sep_id, self.pad_id = (self.vocab[CLS], self.vocab[SEP],
                                                 self.vocab.get(PAD, 0))

    @property
    def vocab_size(self) -> int:
        return len(self._id_to_token)

    def tokenize(self, text: str, maxlen: Optional[int] = None) -> List[str]:
        """WordPiece tokens of `text` between `[CLS]` and `[SEP]`, as in bert4keras."""
        ids, _ = self.encode(text, maxlen=maxlen)
        return [self._id_to_token[i] for i in ids]

    def encode(self, first: str, second: Optional[str] = None,
               maxlen: Optional[int] = None) -> Tuple[List[int], List[int]]:
        """`(token_ids, segment_ids)` of `[CLS] first [SEP] (second [SEP])`.

        With `maxlen`, the longer text loses tokens from its end until the
        whole fits (ties: the first text), as bert4keras does.
        """
        pieces = [self._backend.encode(first, add_special_tokens=False).ids]
        if second is not None:
            pieces.append(self._backend.encode(second, add_special_tokens=False).ids)
        return self._assemble(pieces, maxlen)

    def encode_all(self, first: Sequence[str], second: Optional[Sequence[Optional[str]]] = None,
                   maxlen: Optional[int] = None) -> List[Tuple[List[int], List[int]]]:
        """`encode` for many texts (or pairs; a `None` second text means none), unpadded.

        The texts are tokenized together, in parallel, by `tokenizers`.
        """
        firsts = [e.ids for e in self._backend.encode_batch(list(first), add_special_tokens=False)]
        seconds: List[Optional[List[int]]] = [None] * len(firsts)
        if second is not None:
            present = [i for i, text in enumerate(second) if text is not None]
            encoded = self._backend.encode_batch([second[i] for i in present], add_special_tokens=False)
            for i, encoding in zip(present, encoded):
                seconds[i] = encoding.ids
        return [self._assemble([a] if b is None else [a, b], maxlen) for a, b in zip(firsts, seconds)]

    def encode_batch(self, first: Sequence[str], second: Optional[Sequence[Optional[str]]] = None,
                     maxlen: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
        """Encodes many texts (or pairs) at once, padded with 0 to the longest.

        Returns int32 arrays `token_ids` and `segment_ids` of shape `[n, length]`.
        """
        return pad_batch(self.encode_all(first, second, maxlen), self.pad_id)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, special tokens left out and word pieces joined."""
        special = self._special_ids
        return self._backend.decode([int(i) for i in ids if int(i) not in special])

    def token_to_id(self, token: str) -> int:
        """The id of `token`, or that of `[UNK]`."""
        return self.vocab.get(token, self.vocab[UNK])

    def id_to_token(self, index: int) -> str:
        return self._id_to_token[int(index)]

    @property
    def _special_ids(self) -> set:
        return {self.vocab[t] for t in (CLS, SEP, PAD, MASK) if t in self.vocab}

    def _assemble(self, pieces: List[List[int]], maxlen: Optional[int]) -> Tuple[List[int], List[int]]:
        if maxlen is not None:
            _truncate_longest_first(pieces, maxlen - len(pieces) - 1)
        token_ids, segment_ids = [self.cls_id], [0]
        for segment, piece in enumerate(pieces):
            token_ids += piece + [self.sep_id]
            segment_ids += [segment] * (len(piece) + 1)
        return token_ids, segment_ids


def pad_batch(encoded: Sequence[Tuple[List[int], List[int]]], pad_id: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """Pads `(token_ids, segment_ids)` pairs to one length: two int32 arrays."""
    length = max(len(ids) for ids, _ in encoded)
    tokens = np.full((len(encoded), length), pad_id, dtype=np.int32)
    segments = np.zeros((len(encoded), length), dtype=np.int32)
    for row, (ids, segs) in enumerate(encoded):
        tokens[row, : len(ids)] = ids
        segments[row, : len(segs)] = segs
    return tokens, segments


def _truncate_longest_first(pieces: List[List[int]], budget: int) -> None:
    if budget < 0:
        raise ValueError(f"maxlen is too small for {len(pieces)} text(s) and their special tokens")
    while sum(len(piece) for piece in pieces) > budget:
        longest = max(range(len(pieces)), key=lambda i: (len(pieces[i]), -i))
        pieces[longest].pop()


def _read_vocab(path: str) -> Dict[str, int]:
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
    vocab = {token.strip(): index for index, token in enumerate(tokens)}
    missing = [t for t in (CLS, SEP, UNK) if t not in vocab]
    if missing:
        raise KbertError(f"{path}: the vocabulary lacks {', '.join(missing)}; is this a BERT vocab.txt?")
    return vocab
