"""A folder's chat template, and the (query, document) pairs a causal-LM reranker reads through it.

sentence-transformers 6 gives a causal LM's `CrossEncoder` each pair as two messages, roles `query` and `document`
(a prompt before them as a `system` message), rendered by the tokenizer's chat template (Jinja, as transformers
renders it: a sandbox, blocks trimmed) and tokenized without the tokenizer's own special tokens. A row cut to the
longest input loses the template's tail, which the model reads at its last position; the tail is written back over
the row's last tokens. A folder without a template gets the tokenizer's own pair encoding.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from kbert.errors import CheckpointError, KbertError, first_line

TEMPLATE_FILE = "chat_template.jinja"
PAIR_ROLES = ("query", "document")
# tokenizer_config.json's special tokens, each a variable of the template (`{{ bos_token }}`)
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def read_chat_template(folder: str, settings: Mapping) -> Optional[Tuple[str, str]]:
    """`(template, where it was read)` of a folder: its `chat_template.jinja`, else `tokenizer_config.json`'s
    `chat_template` (a string, or a list of named templates: the one named `default`); None where it has none."""
    path = os.path.join(folder, TEMPLATE_FILE)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as handle:
            return handle.read(), path
    where = os.path.join(folder, "tokenizer_config.json")
    template = settings.get("chat_template")
    if isinstance(template, list):
        named = {entry.get("name"): entry.get("template") for entry in template if isinstance(entry, dict)}
        template = named.get("default")
    if template is None:
        return None
    if not isinstance(template, str):
        raise CheckpointError(f"{where}: key 'chat_template': expected a Jinja template (a string, or a list of "
                              f"{{name, template}} with one named 'default'), got {type(template).__name__}")
    return template, where


class ChatTemplate:
    """A chat template compiled as transformers compiles it (Jinja's sandbox, `trim_blocks`, `lstrip_blocks`,
    loop controls, `tojson`, `raise_exception`, `strftime_now`).

    Args:
        source: the template.
        where: the file it came from (named in errors).
        variables: what every render sees beside the messages (the tokenizer's special tokens).

    Example:
    >>> template = ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{{ eos_token }}",
    ...                         "chat_template.jinja", {"eos_token": "</s>"})
    >>> template.render([{"role": "query", "content": "q"}, {"role": "document", "content": "d"}])
    '<query>q<document>d</s>'
    """

    def __init__(self, source: str, where: str, variables: Mapping[str, str]):
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                    extensions=["jinja2.ext.loopcontrols"])
        environment.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False,
                                                                              indent=indent)
        environment.globals.update(raise_exception=raise_exception,
                                   strftime_now=lambda format: datetime.now().strftime(format))
        self.source, self.where, self.variables = source, where, dict(variables)
        try:
            self._template = environment.from_string(source)
        except jinja2.exceptions.TemplateError as error:
            raise CheckpointError(f"{where}: not a Jinja template kbert can render ({first_line(error)})") from None

    def render(self, messages: Sequence[Mapping[str, str]], **variables) -> str:
        import jinja2

        try:
            return self._template.render(messages=list(messages), add_generation_prompt=False,
                                         **{**self.variables, **variables})
        except jinja2.exceptions.TemplateError as error:
            raise KbertError(f"{self.where}: the chat template failed on {len(messages)} messages of roles "
                             f"{[message['role'] for message in messages]} ({first_line(error)})") from None


class ChatPairs:
    """Query-document pairs as a causal-LM CrossEncoder reads them: each pair rendered by the folder's chat
    template (roles `query` and `document`, the `prompt` before them as a `system` message) and tokenized
    without special tokens; the encoding interface of the tokenizer it wraps (`encode_all`, `pad_id`, `padding`).

    Args:
        tokenizer: the folder's `TokenizerJson`.
        template: its `ChatTemplate`; None: the tokenizer's own pair encoding (the prompt before each query).
        prompt: the folder's default prompt (None: none).
        template_settings: more variables for the template (sentence-transformers' `processing_kwargs`'
            `chat_template`).
    """

    def __init__(self, tokenizer, template: Optional[ChatTemplate], prompt: Optional[str] = None,
                 template_settings: Optional[Mapping] = None):
        self.tokenizer, self.template, self.prompt = tokenizer, template, prompt
        self.template_settings = dict(template_settings or {})
        self.pad_id, self.padding = tokenizer.pad_id, tokenizer.padding
        self.vocab_size, self.unk_id, self.pad_token_id = tokenizer.vocab_size, tokenizer.unk_id, tokenizer.pad_token_id
        self._tail_ids: Optional[List[int]] = None

    def encode_all(self, first: Sequence[str], second: Optional[Sequence[Optional[str]]] = None,
                   maxlen: Optional[int] = None) -> List[Tuple[List[int], List[int]]]:
        """Token and segment ids (all 0) of each pair, at most `maxlen` tokens, the template's tail kept."""
        if second is None or any(passage is None for passage in second):
            raise KbertError("a causal-LM reranker reads (query, document) pairs; a text alone has no score")
        if self.template is None:
            queries = [self.prompt + query for query in first] if self.prompt else list(first)
            return [(ids, [0] * len(ids)) for ids, _ in self.tokenizer.encode_all(queries, second, maxlen)]
        rendered = [self.template.render(self._messages(query, passage), **self.template_settings)
                    for query, passage in zip(first, second)]
        rows = [ids for ids, _ in self.tokenizer.ids_and_offsets(rendered)]
        if maxlen and any(len(row) > maxlen for row in rows):
            tail = self._tail()
            kept = min(len(tail), maxlen)
            rows = [row if len(row) <= maxlen else row[:maxlen - kept] + tail[len(tail) - kept:] for row in rows]
        return [(row, [0] * len(row)) for row in rows]

    def encode(self, first: str, second: Optional[str] = None, maxlen: Optional[int] = None):
        return self.encode_all([first], [second], maxlen)[0]

    def _messages(self, query: str, passage: str) -> List[Dict[str, str]]:
        system = [{"role": "system", "content": self.prompt}] if self.prompt else []
        return system + [{"role": role, "content": text} for role, text in zip(PAIR_ROLES, (query, passage))]

    def _tail(self) -> List[int]:
        """The template's tail in tokens, what follows the document: the longest common end of two renders with
        different contents (which tokenize apart), as sentence-transformers finds it; [] where they never
        differ."""
        if self._tail_ids is None:
            first, second = (ids for ids, _ in self.tokenizer.ids_and_offsets(
                [self.template.render(self._messages(filler, filler), **self.template_settings)
                 for filler in ("0", "1 2 3 4")]))
            common = 0
            while common < min(len(first), len(second)) and first[-1 - common] == second[-1 - common]:
                common += 1
            self._tail_ids = first[len(first) - common:] if 0 < common < min(len(first), len(second)) else []
        return self._tail_ids
