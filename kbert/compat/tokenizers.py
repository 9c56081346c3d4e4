"""`bert4keras.tokenizers` on kbert: `Tokenizer`, `SpTokenizer`, `load_vocab`, `save_vocab`.

`Tokenizer` here has bert4keras's defaults and framing options: lower-casing
off unless asked (`do_lower_case=False`, kbert's own `kbert.Tokenizer` lower-cases
by default), and `token_start` / `token_end` (None leaves `[CLS]` or `[SEP]`
out, as GPT scripts ask).

Example:
>>> from kbert.compat.tokenizers import Tokenizer
>>> vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "好": 4}
>>> Tokenizer(vocab).encode("好")
([2, 4, 3], [0, 0, 0])
>>> Tokenizer(vocab, token_start=None, token_end=None).encode("好好")
([4, 4], [0, 0])
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from kbert.compat.snippets import truncate_sequences
from kbert.errors import KbertError
from kbert.tokenizers import wordpiece
from kbert.tokenizers import sentence_piece
from kbert.tokenizers.vocab import load_vocab, save_vocab

__all__ = ["SpTokenizer", "Tokenizer", "load_vocab", "save_vocab"]


class Tokenizer(wordpiece.Tokenizer):
    """kbert's WordPiece `Tokenizer` with bert4keras's signature.

    Args:
        token_dict: the vocabulary (a `vocab.txt` path or a `{token: id}` dict).
        do_lower_case: as bert4keras, False unless given.
        token_start, token_end: the tokens framing a text (None: none).
    """

    def __init__(self, token_dict, do_lower_case: bool = False, token_start: Optional[str] = "[CLS]",
                 token_end: Optional[str] = "[SEP]", **kwargs):
        unsupported = sorted(set(kwargs) - {"word_maxlen"})  # word_maxlen: WordPiece's own limit applies
        if unsupported:
            raise KbertError(f"Tokenizer: bert4keras's {', '.join(unsupported)} is not supported by kbert's "
                             "WordPiece tokenizer; split or translate the text before encoding it")
        super().__init__(token_dict, do_lower_case)
        self.token_start, self.token_end = token_start, token_end

    def _framed_as_bert(self) -> bool:
        return (self.token_start, self.token_end) == (wordpiece.CLS, wordpiece.SEP)

    def tokenize(self, text: str, maxlen: Optional[int] = None) -> List[str]:
        if self._framed_as_bert():
            return super().tokenize(text, maxlen)
        tokens = [self.token_start] * (self.token_start is not None) + self._tokens([text])[0][0] \
            + [self.token_end] * (self.token_end is not None)
        if maxlen is not None:
            truncate_sequences(maxlen, -(int(self.token_end is not None) + 1), tokens)
        return tokens

    def encode(self, first: str, second: Optional[str] = None,
               maxlen: Optional[int] = None) -> Tuple[List[int], List[int]]:
        if self._framed_as_bert():
            return super().encode(first, second, maxlen)
        first_tokens = self.tokenize(first)
        second_tokens = self.tokenize(second)[int(self.token_start is not None):] if second is not None else []
        if maxlen is not None:
            truncate_sequences(maxlen, -2, first_tokens, second_tokens)
        token_ids = self.tokens_to_ids(first_tokens) + self.tokens_to_ids(second_tokens)
        return token_ids, [0] * len(first_tokens) + [1] * len(second_tokens)


class SpTokenizer(sentence_piece.SpTokenizer):
    """kbert's `SpTokenizer` with bert4keras's `pre_tokenize` and `token_translate`.

    Args:
        sp_model_path, token_start, token_end: as `kbert.SpTokenizer`.
        pre_tokenize: a function from a text to its words (CPM-LM's: jieba);
            the words, joined by spaces, are what SentencePiece cuts.
        token_translate: `{piece: piece}` replacements after cutting (CPM-LM:
            its newline piece to `<cls>`); `decode` undoes them.
    """

    def __init__(self, sp_model_path, token_start: Optional[str] = None, token_end: Optional[str] = "</s>",
                 pre_tokenize=None, token_translate=None):
        super().__init__(sp_model_path, token_start, token_end)
        self.pre_tokenize = pre_tokenize
        self.token_translate = dict(token_translate or {})
        self.token_translate_inverse = {new: old for old, new in self.token_translate.items()}

    def _pieces(self, text: str) -> List[str]:
        if self.pre_tokenize is not None:
            text = " ".join(self.pre_tokenize(text))
        return [self.token_translate.get(piece, piece) for piece in self.sp_model.encode_as_pieces(text)]

    def encode(self, first: str, second: Optional[str] = None,
               maxlen: Optional[int] = None) -> Tuple[List[int], List[int]]:
        texts = [first] if second is None else [first, second]
        return self._assemble([self.tokens_to_ids(self._pieces(text)) for text in texts], maxlen)

    def decode(self, ids) -> str:
        pieces = [self.token_translate_inverse.get(piece, piece) for piece in self.ids_to_tokens(self._text_ids(ids))]
        return self.sp_model.decode_pieces(pieces)
