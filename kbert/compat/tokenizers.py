"""`bert4keras.tokenizers` on kbert: `Tokenizer`, `SpTokenizer`, `load_vocab`, `save_vocab`.

Example:
>>> from kbert.compat.tokenizers import Tokenizer
>>> Tokenizer({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "好": 4}).encode("好")
([2, 4, 3], [0, 0, 0])
"""

from kbert.tokenizers.sentence_piece import SpTokenizer
from kbert.tokenizers.vocab import load_vocab, save_vocab
from kbert.tokenizers.wordpiece import Tokenizer

__all__ = ["SpTokenizer", "Tokenizer", "load_vocab", "save_vocab"]
