"""Text to ids: the WordPiece `Tokenizer` (Google's rules) and vocabulary files.

- `wordpiece`: `Tokenizer`, Google's character rules, then word split and
  WordPiece in the `tokenizers` library; `pad_batch`.
- `sentence_piece`: `SpTokenizer`, a SentencePiece model (T5, mT5) with
  bert4keras's interface.
- `vocab`: `load_vocab` (bert4keras's simplified vocabulary), `save_vocab`.
"""

from kbert.tokenizers.sentence_piece import SpTokenizer
from kbert.tokenizers.vocab import load_vocab, save_vocab
from kbert.tokenizers.wordpiece import Tokenizer, pad_batch



def load_tokenizer(path, do_lower_case: bool = True):
    """The tokenizer of a vocabulary file: `SpTokenizer` for a SentencePiece model (a `.model` file,
    T5's framing), else the WordPiece `Tokenizer` of a `vocab.txt`."""
    import os

    if os.fspath(path).endswith(".model"):
        return SpTokenizer(path)
    return Tokenizer(path, do_lower_case=do_lower_case)


__all__ = ["SpTokenizer", "Tokenizer", "load_tokenizer", "load_vocab", "pad_batch", "save_vocab"]
