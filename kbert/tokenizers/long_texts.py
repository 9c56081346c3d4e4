"""Tokenizing texts far longer than a model reads: only as much of each as gives the model its tokens."""

from __future__ import annotations

from typing import List, Sequence, Tuple

# Characters of a text tokenized at first when it is longer: a token is rarely more than a few characters, so a
# cut at a word boundary this far in still gives more tokens than the model reads.
_CHARACTERS_PER_TOKEN = 32


def encode_within(tokenizer, texts: Sequence[str], maxlen: int) -> List[Tuple[List[int], List[int]]]:
    """`tokenizer.encode_all(texts, maxlen=maxlen)`, without tokenizing what the model cannot read: a text far
    longer than `maxlen` tokens is tokenized up to a word boundary `_CHARACTERS_PER_TOKEN * maxlen` characters in
    (whole only where that part gives fewer than `maxlen` tokens), so a 10 MB line costs what its first tokens
    cost. The ids are the whole text's: the words before a boundary tokenize alike, and the cut keeps `maxlen`."""
    cut = [_word_prefix(text, _CHARACTERS_PER_TOKEN * maxlen) for text in texts]
    encoded = tokenizer.encode_all(cut, maxlen=maxlen)
    whole = [index for index, (text, part) in enumerate(zip(texts, cut))
             if len(part) < len(text) and len(encoded[index][0]) < maxlen]
    if whole:
        for index, ids in zip(whole, tokenizer.encode_all([texts[index] for index in whole], maxlen=maxlen)):
            encoded[index] = ids
    return encoded


def _word_prefix(text: str, budget: int) -> str:
    """`text` up to the last whitespace within its first `budget` characters (all of it when shorter)."""
    if len(text) <= budget:
        return text
    space = max(text.rfind(" ", 0, budget), text.rfind("\n", 0, budget), text.rfind("\t", 0, budget))
    return text[:space] if space > 0 else text[:budget]
