"""A model behind a server's batcher that runs token ids (an embedding model, a reranker): each request is
tokenized once, on the batcher's tokenizing threads, to count its tokens for the batch's budget and check its
length before a batch forms; the batcher then calls the service on the ids."""

from typing import Callable, List, Optional, Tuple

from kbert.errors import KbertError
from kbert.serving.batcher import Batcher


class TooLong(KbertError):
    """An input has more tokens than the model takes, and the request did not ask to cut it."""


class TokenizedService:
    """A model whose server batches run token ids: each request is tokenized once, on a worker thread
    (off the event loop), to count its tokens for the batch's budget and check its length before a
    batch forms; the batcher then calls the service on the ids (`__call__`, each subclass's own).

    Args:
        model: an `Embedder` or a `Reranker` (anything with `tokenizer` and `maxlen`).
        batch_size: inputs in one model call at most (the server's `--max-batch`).
    """

    def __init__(self, model, batch_size: int):
        self.model, self.batch_size = model, batch_size

    def too_long(self, tokens: int) -> str:
        """What a `TooLong` says after the input's index."""
        return f"{tokens} tokens, more than the model's {self.model.maxlen}"

    def tokenize(self, texts: List[str], pairs: Optional[List[str]], truncate: bool, maxlen: Optional[int] = None,
                 too_long: Optional[Callable[[int], str]] = None) -> Tuple[list, List[int]]:
        """Each input's ids, cut to `maxlen` (None: the model's length) where `truncate` (else `TooLong`, naming
        the input, in `too_long`'s words of its token count: None, the service's), and the number of tokens the
        model reads for each."""
        tokenizer, maxlen = self.model.tokenizer, maxlen or self.model.maxlen
        too_long = too_long or self.too_long
        encoded = tokenizer.encode_all(texts, pairs)
        for index, (ids, _) in enumerate(encoded):
            if len(ids) > maxlen:
                if not truncate:
                    raise TooLong(f"[{index}]: {too_long(len(ids))}; shorten it, or ask for it to be cut")
                encoded[index] = tokenizer.encode(texts[index], pairs[index] if pairs else None, maxlen=maxlen)
        return encoded, [len(ids) for ids, _ in encoded]

    async def run(self, batcher: Batcher, texts: List[str], pairs: Optional[List[str]], truncate: bool,
                  rows: Optional[Callable[[list], list]] = None) -> Tuple[list, int]:
        """The batch's rows for these inputs, and the tokens they took (`QueueFull` before tokenizing when the
        queue has no room); `rows`: what the tokenized inputs become before they join a batch (an embedding
        model's tokens to pool)."""
        encoded, counts = await batcher.prepare(len(texts), self.tokenize, texts, pairs, truncate)
        return await batcher.predict(rows(encoded) if rows else encoded, tokens=sum(counts)), sum(counts)
