"""Text to ids: the WordPiece `Tokenizer` (Google's rules) and vocabulary files.

- `wordpiece`: `Tokenizer`, Google's character rules, then word split and
  WordPiece in the `tokenizers` library; `pad_batch`.
- `sentence_piece`: `SpTokenizer`, a SentencePiece model (T5, mT5) with
  bert4keras's interface.
- `vocab`: `load_vocab` (bert4keras's simplified vocabulary), `save_vocab`.
- `hub`: `TokenizerJson`, a Hugging Face `tokenizer.json` run as transformers runs it (embedding models).
- `long_texts`: `encode_within`, a text far longer than a model reads tokenized only as far as it reads.
"""

from kbert.tokenizers.sentence_piece import SpTokenizer
from kbert.tokenizers.vocab import load_vocab, save_vocab
from kbert.tokenizers.wordpiece import SENTENCEPIECE_NAME, Tokenizer, pad_batch, vocab_in_directory



def load_tokenizer(path, do_lower_case: bool = True):
    """The tokenizer of a vocabulary: `SpTokenizer` for a SentencePiece model (a `.model` file; T5's
    framing), else the WordPiece `Tokenizer` of a `vocab.txt` or `tokenizer.json`; for a model
    directory, of its vocabulary (`vocab_in_directory`)."""
    import os

    path = os.fspath(path)
    if os.path.isdir(path):
        path = vocab_in_directory(path)
    if path.endswith(".model"):
        return SpTokenizer(path)
    return Tokenizer(path, do_lower_case=do_lower_case)


__all__ = ["SENTENCEPIECE_NAME", "SpTokenizer", "Tokenizer", "load_tokenizer", "load_vocab", "pad_batch", "save_vocab",
           "vocab_in_directory"]
