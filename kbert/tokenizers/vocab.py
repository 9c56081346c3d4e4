"""Vocabulary files: `load_vocab` (with bert4keras's simplified vocabulary) and `save_vocab`.

A simplified vocabulary drops the tokens a Chinese model never produces with
kbert's (and bert4keras's) tokenizer: every token of more than one character
that holds a CJK or punctuation character (`##的`, `[unused1]`, `<S>`), since
those characters always stand alone. What it keeps, in order, and the
original ids of what it keeps (`keep_tokens`), let `build_transformer_model(
..., keep_tokens=keep_tokens)` load a checkpoint with only those rows of the
embedding and MLM tables.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Tuple, Union

from kbert.errors import KbertError
from kbert.io import atomic_write_text
from kbert.tokenizers.wordpiece import is_cjk_character, is_punctuation


def load_vocab(
    dict_path: "str | os.PathLike[str]",
    encoding: str = "utf-8",
    simplified: bool = False,
    startswith: Optional[Sequence[str]] = None,
) -> Union[Dict[str, int], Tuple[Dict[str, int], List[int]]]:
    """Reads a `vocab.txt` as `{token: id}`, as bert4keras's `load_vocab` does.

    Args:
        dict_path: the vocabulary, one token a line (the first field of the
            line; a token's id is its line number).
        encoding: the file's encoding.
        simplified: also drop the redundant tokens (see the module docstring)
            and return `(token_dict, keep_tokens)`.
        startswith: with `simplified`, tokens to put first, in this order
            (typically `["[PAD]", "[UNK]", "[CLS]", "[SEP]"]`).

    Example:
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    >>> _ = open(path, "w", encoding="utf-8").write("[PAD]\\n[unused1]\\n[UNK]\\n[CLS]\\n[SEP]\\n的\\n##的\\nthe\\n##s\\n")
    >>> load_vocab(path, simplified=True, startswith=["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    ({'[PAD]': 0, '[UNK]': 1, '[CLS]': 2, '[SEP]': 3, '的': 4, 'the': 5, '##s': 6}, [0, 2, 3, 4, 5, 7, 8])
    """
    path = os.fspath(dict_path)
    token_dict: Dict[str, int] = {}
    try:
        with open(path, encoding=encoding) as reader:
            for line in reader:
                fields = line.split()
                token_dict[fields[0] if fields else line.strip()] = len(token_dict)
    except FileNotFoundError:
        raise KbertError(f"{path}: vocabulary file not found") from None
    except UnicodeDecodeError as error:
        raise KbertError(f"{path}: not {encoding} text ({error.reason} at byte {error.start})") from None
    if not simplified:
        return token_dict
    kept: Dict[str, int] = {}
    keep_tokens: List[int] = []
    for token in startswith or []:
        if token not in token_dict:
            raise KbertError(f"{path}: startswith names {token!r}, which the vocabulary lacks")
        kept[token] = len(kept)
        keep_tokens.append(token_dict[token])
    for token, index in sorted(token_dict.items(), key=lambda item: item[1]):
        if token not in kept and not is_redundant(token):
            kept[token] = len(kept)
            keep_tokens.append(index)
    return kept, keep_tokens


def is_redundant(token: str) -> bool:
    """A token of several characters holding a CJK or punctuation character (after any `##`)."""
    if len(token) <= 1:
        return False
    stem = token[2:] if token.startswith("##") else token
    return any(is_cjk_character(char) or is_punctuation(char) for char in stem)


def save_vocab(dict_path: "str | os.PathLike[str]", token_dict: Dict[str, int]) -> None:
    """Writes `{token: id}` as a `vocab.txt` (tokens in id order), atomically."""
    tokens = [token for token, _ in sorted(token_dict.items(), key=lambda item: item[1])]
    atomic_write_text(dict_path, "".join(f"{token}\n" for token in tokens))
