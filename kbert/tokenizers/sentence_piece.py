"""`SpTokenizer`: a SentencePiece model (T5, mT5, T5 PEGASUS ports) behind bert4keras's tokenizer interface.

The pieces and ids are the `sentencepiece` package's own; what this adds is
bert4keras's way of framing them: an optional start token, an end token
(T5's `</s>`), pairs joined as `start first end second end`, and `maxlen`
truncating the longer text first, as the WordPiece `Tokenizer` does.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Tuple

from kbert.errors import KbertError
from kbert.tokenizers.wordpiece import _truncate_longest_first


class SpTokenizer:
    """A SentencePiece model's tokenizer, with bert4keras's `SpTokenizer` interface.

    Args:
        sp_model_path: the SentencePiece model file (e.g. T5's `spiece.model`).
        token_start: a piece put before the text (None: none, as T5).
        token_end: a piece put after each text (T5's `</s>`; None: none).

    bert4keras's defaults are `[CLS]` and `[SEP]`, which SentencePiece models
    rarely have; kbert's are T5's framing, and a piece the model lacks is an
    error (bert4keras silently gave it the unknown piece's id). The special
    ids are attributes as in bert4keras: `_token_pad_id`, `_token_unk_id`,
    `_token_start_id`, `_token_end_id`, and `_vocab_size`.

    Example:
    >>> import io, os, tempfile, sentencepiece
    >>> model = io.BytesIO()
    >>> sentencepiece.SentencePieceTrainer.train(
    ...     sentence_iterator=iter(["我们去北京", "北京很好", "我们很好"] * 20), model_writer=model,
    ...     vocab_size=12, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
    >>> path = os.path.join(tempfile.mkdtemp(), "spiece.model")
    >>> _ = open(path, "wb").write(model.getvalue())
    >>> tokenizer = SpTokenizer(path)
    >>> ids, segments = tokenizer.encode("北京很好")
    >>> ids[-1] == tokenizer._token_end_id == 1, tokenizer.decode(ids)
    (True, '北京很好')
    """

    def __init__(self, sp_model_path: "str | os.PathLike[str]", token_start: Optional[str] = None,
                 token_end: Optional[str] = "</s>"):
        import sentencepiece

        path = os.fspath(sp_model_path)
        self.sp_model = sentencepiece.SentencePieceProcessor()
        try:
            self.sp_model.Load(path)
        except (OSError, RuntimeError) as error:
            raise KbertError(f"{path}: cannot read a SentencePiece model ({str(error).strip()})") from None
        self.path = path
        self._vocab_size = self.sp_model.get_piece_size()
        self._token_unk_id = self.unk_id = self.sp_model.unk_id()
        # SentencePiece may have no padding piece (pad_id -1); ids are then padded with 0, as bert4keras's
        # are, which `kbert train` refuses (`has_padding_piece`): 0 is then a real piece.
        self.has_padding_piece = self.sp_model.pad_id() >= 0
        self._token_pad_id = max(self.sp_model.pad_id(), 0)
        self._token_pad = self.sp_model.id_to_piece(self._token_pad_id)
        self._token_unk = self.sp_model.id_to_piece(self._token_unk_id)
        self._token_start, self._token_end = token_start, token_end
        self._token_start_id = self._special_id(token_start, "token_start")
        self._token_end_id = self._special_id(token_end, "token_end")

    def _special_id(self, piece: Optional[str], argument: str) -> Optional[int]:
        if piece is None:
            return None
        index = self.sp_model.piece_to_id(piece)
        if index == self._token_unk_id and piece != self._token_unk:
            raise KbertError(f"{self.path}: the SentencePiece model has no piece {piece!r} ({argument}); "
                             f"pass {argument}=None or one of its control pieces, e.g. "
                             f"{self.sp_model.id_to_piece(max(self.sp_model.eos_id(), 0))!r}")
        return index

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def pad_id(self) -> int:
        """The id batches are padded with: the padding piece, which no text holds (a control piece)."""
        return self._token_pad_id

    pad_token_id = pad_id  # the padding piece (`TokenizerJson`'s name: there `pad_id` is a negative id)

    @property
    def padding(self) -> int:
        """What a model built for this tokenizer's batches hides (`build_transformer_model(padding=)`): its pad id."""
        return self.pad_id

    @property
    def cls_id(self) -> Optional[int]:
        """The start piece's id (None without one); the WordPiece `Tokenizer`'s name for it."""
        return self._token_start_id

    @property
    def sep_id(self) -> Optional[int]:
        """The end piece's id (T5's `</s>`)."""
        return self._token_end_id

    @property
    def vocab(self) -> Dict[str, int]:
        """Every piece and its id."""
        return {self.sp_model.id_to_piece(index): index for index in range(self._vocab_size)}

    def tokenize(self, text: str, maxlen: Optional[int] = None) -> List[str]:
        """The pieces of `text`, framed by the start and end tokens; `maxlen` drops pieces from the end."""
        return self.ids_to_tokens(self.encode(text, maxlen=maxlen)[0])

    def encode(self, first: str, second: Optional[str] = None,
               maxlen: Optional[int] = None) -> Tuple[List[int], List[int]]:
        """`(token_ids, segment_ids)` of `start first end (second end)`, the second text in segment 1."""
        texts = [first] if second is None else [first, second]
        return self._assemble([list(ids) for ids in self.sp_model.encode(texts)], maxlen)

    def encode_all(self, first: Sequence[str], second: Optional[Sequence[Optional[str]]] = None,
                   maxlen: Optional[int] = None) -> List[Tuple[List[int], List[int]]]:
        """`encode` for many texts (or pairs; a `None` second text means none), unpadded."""
        seconds = second if second is not None else [None] * len(first)
        return [self.encode(a, b, maxlen) for a, b in zip(first, seconds)]

    def _assemble(self, pieces: List[List[int]], maxlen: Optional[int]) -> Tuple[List[int], List[int]]:
        start = [] if self._token_start_id is None else [self._token_start_id]
        end = [] if self._token_end_id is None else [self._token_end_id]
        if maxlen is not None:
            _truncate_longest_first(pieces, maxlen - len(start) - len(end) * len(pieces))
        token_ids, segment_ids = list(start), [0] * len(start)
        for segment, piece in enumerate(pieces):
            token_ids += piece + end
            segment_ids += [segment] * (len(piece) + len(end))
        return token_ids, segment_ids

    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids`; control pieces (padding, start, end) and ids past the vocabulary are left out."""
        return self.sp_model.decode(self._text_ids(ids))

    def _text_ids(self, ids: Sequence[int]) -> List[int]:
        """`ids` without control pieces and ids past the vocabulary: what `decode` turns into text."""
        return [int(i) for i in ids if 0 <= int(i) < self._vocab_size and not self.sp_model.is_control(int(i))]

    def token_to_id(self, token: str) -> int:
        return self.sp_model.piece_to_id(token)

    def id_to_token(self, index: int) -> str:
        return self.sp_model.id_to_piece(index) if 0 <= index < self._vocab_size else ""

    def tokens_to_ids(self, tokens: Sequence[str]) -> List[int]:
        return [self.token_to_id(token) for token in tokens]

    def ids_to_tokens(self, ids: Sequence[int]) -> List[str]:
        return [self.id_to_token(index) for index in ids]
