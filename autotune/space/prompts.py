"""Prompts and where they come from: the built-in set, a JSONL file, or a ShareGPT JSON file.

A :class:`Prompt` is one request to send. The readers turn a file into entries that keep each
prompt's natural output length, and :func:`to_prompts` applies the output-length mode and drops
repeats. :class:`autotune.space.workload.Workload` picks its warm-up and measured samples from
them; the file formats sit here, apart from the ``workload:`` keys, because the benchmark client
and the tests use prompts without a workload.

File formats:

* JSONL, one object per line: ``{"prompt": "..."}`` or ``{"messages": [{"role": "user",
  "content": "..."}, ...]}``, with optional ``"max_tokens": N`` (required for natural length) and
  ``"id"`` and ``"category"`` (the prompt's kind, for ``workload.sample: stratified``). Other keys
  are ignored. Blank lines are skipped.
* ShareGPT JSON: ``[{"id": ..., "conversations": [{"from": "human", "value": "..."},
  {"from": "gpt", "value": "..."}, ...]}, ...]``. The first human turn is the prompt; the natural
  output length is the next gpt turn's word count times 1.3 (about one token per 0.75 words).
  Conversations without a human turn followed by a gpt turn are skipped, as SGLang's
  ``bench_serving`` does.

A production sample (``workload.production_sample``, :func:`read_sample`) is read as JSONL when its
name ends in ``.jsonl``, as ShareGPT JSON when it ends in ``.json``, else as text with one prompt a
line; only its prompts' text counts (it is compared, never sent).

Every problem in a file is reported as a :class:`~autotune.errors.ConfigError` with the file, the
line and what would be right.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError

#: Tokens per word for ShareGPT reference answers (English averages about 1.3).
TOKENS_PER_WORD = 1.3
_ROLES = ("system", "user", "assistant", "tool", "developer")
_HUMAN = ("human", "user")
_GPT = ("gpt", "assistant", "chatgpt", "bard", "bing", "model")


@dataclass(frozen=True)
class Prompt:
    """One request to send.

    Exactly one of ``text`` and ``messages`` is set.

    Attributes:
        id: Stable identifier (from the data, or ``<file stem>:<line>``).
        max_tokens: Output tokens to ask for.
        ignore_eos: True for fixed output length (generate exactly ``max_tokens``).
        text: A plain prompt.
        messages: A chat, as ``(role, content)`` pairs.
        kind: The prompt's kind from the data (a JSONL line's ``"category"``: ``chat``, ``code``,
            ``math`` in the built-in set), or None; ``workload.sample: stratified`` balances it.
    """

    id: str
    max_tokens: int
    ignore_eos: bool
    text: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None
    kind: str | None = None

    def __post_init__(self) -> None:
        if (self.text is None) == (self.messages is None):
            raise ValueError("a Prompt needs exactly one of text and messages")
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) \
                or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")

    def as_text(self) -> str:
        """The prompt as plain text; a chat is rendered as ``Role: content`` turns.

        SGLang's ``/generate`` applies no chat template, and the benchmark has no tokenizer, so
        this neutral rendering stands in for one.
        """
        if self.text is not None:
            return self.text
        turns = [f"{role.capitalize()}: {content}" for role, content in self.messages or ()]
        return "\n\n".join(turns) + "\n\nAssistant:"

    def as_messages(self) -> list[dict[str, str]]:
        """The prompt as OpenAI chat messages; plain text becomes one user turn."""
        if self.messages is not None:
            return [{"role": r, "content": c} for r, c in self.messages]
        return [{"role": "user", "content": self.text or ""}]

    def content_key(self) -> str | tuple[tuple[str, str], ...]:
        """What makes two prompts the same prompt (id and lengths aside)."""
        return self.text if self.text is not None else self.messages  # type: ignore[return-value]


@dataclass(frozen=True)
class _Entry:
    """A prompt as read from a file, before the output-length mode is applied."""

    id: str
    text: str | None
    messages: tuple[tuple[str, str], ...] | None
    natural_tokens: int | None
    line: int
    kind: str | None = None


# --------------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------------

def _check_max_tokens(value: Any, *, file: str, line: int, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{field} must be an integer >= 1, got {value!r}", file=file,
                          line=line, field=field)
    return value


def _parse_messages(value: Any, *, file: str, line: int) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError("messages must be a non-empty list of {\"role\", \"content\"} objects",
                          file=file, line=line, field="messages")
    out = []
    for i, msg in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise ConfigError(f"{where} must be an object with role and content, got "
                              f"{type(msg).__name__}", file=file, line=line, field=where)
        role, content = msg.get("role"), msg.get("content")
        if role not in _ROLES:
            raise ConfigError(f"{where}.role must be one of {', '.join(_ROLES)}, got {role!r}",
                              file=file, line=line, field=f"{where}.role")
        if not isinstance(content, str):
            raise ConfigError(f"{where}.content must be a string (text only), got "
                              f"{type(content).__name__}", file=file, line=line,
                              field=f"{where}.content")
        out.append((role, content))
    if not any(c.strip() for r, c in out if r == "user"):
        raise ConfigError("messages has no non-empty user turn", file=file, line=line,
                          field="messages")
    return tuple(out)


def _read_text(path: str | Path, *, what: str, display_name: str | None) -> tuple[str, str]:
    """``(name for messages, UTF-8 text)`` of a workload file, or a ConfigError saying why not."""
    p = Path(path)
    name = display_name or str(p)
    try:
        return name, p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {what}: {exc.strerror or exc}", file=name) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} is not UTF-8 text: {exc.reason}", file=name) from exc


def read_jsonl(path: str | Path, *, display_name: str | None = None) -> list[_Entry]:
    """Read a JSONL prompt file (see the module docstring for the format)."""
    name, text = _read_text(path, what="prompt file", display_name=display_name)
    entries = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"invalid JSON at column {exc.colno}: {exc.msg}; each line must be "
                              "one JSON object", file=name, line=lineno) from exc
        if not isinstance(obj, dict):
            raise ConfigError(f"each line must be a JSON object, got {type(obj).__name__}",
                              file=name, line=lineno)
        has_prompt, has_msgs = "prompt" in obj, "messages" in obj
        if has_prompt == has_msgs:
            raise ConfigError("each line needs exactly one of \"prompt\" (a string) and "
                              "\"messages\" (a chat list)", file=name, line=lineno)
        text_v: str | None = None
        msgs = None
        if has_prompt:
            text_v = obj["prompt"]
            if not isinstance(text_v, str) or not text_v.strip():
                raise ConfigError(f"prompt must be a non-empty string, got {text_v!r:.60}",
                                  file=name, line=lineno, field="prompt")
        else:
            msgs = _parse_messages(obj["messages"], file=name, line=lineno)
        natural = None
        if obj.get("max_tokens") is not None:
            natural = _check_max_tokens(obj["max_tokens"], file=name, line=lineno,
                                        field="max_tokens")
        ident = obj.get("id")
        ident = str(ident) if ident is not None else f"{Path(name).stem}:{lineno}"
        kind = obj.get("category")
        entries.append(_Entry(ident, text_v, msgs, natural, lineno,
                              kind=str(kind) if kind is not None else None))
    if not entries:
        raise ConfigError("prompt file has no prompts", file=name)
    return entries


_WS = re.compile(r"\s*")


def _iter_json_array(text: str, *, file: str) -> Iterator[tuple[int, Any]]:
    """Yield ``(line, element)`` for each element of a top-level JSON array."""
    dec = json.JSONDecoder()
    i = _WS.match(text, 0).end()  # type: ignore[union-attr]
    if text[i:i + 1] != "[":
        raise ConfigError("a ShareGPT file must be a JSON array of conversations "
                          "([{\"conversations\": [...]}, ...])", file=file,
                          line=text.count("\n", 0, i) + 1)
    i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
    line, last = 1, 0
    if text[i:i + 1] == "]":
        return
    while True:
        line += text.count("\n", last, i)
        last = i
        try:
            obj, j = dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"invalid JSON at column {exc.colno}: {exc.msg}", file=file,
                              line=exc.lineno) from exc
        yield line, obj
        i = _WS.match(text, j).end()  # type: ignore[union-attr]
        c = text[i:i + 1]
        if c == ",":
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
            continue
        if c == "]":
            break
        raise ConfigError(f"expected ',' or ']' after an array element, found {c or 'the end'!r}",
                          file=file, line=text.count("\n", 0, i) + 1)
    rest = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
    if rest != len(text):
        raise ConfigError("unexpected content after the JSON array", file=file,
                          line=text.count("\n", 0, rest) + 1)


def read_sharegpt(path: str | Path, *, display_name: str | None = None) -> list[_Entry]:
    """Read a ShareGPT JSON file (see the module docstring for the format)."""
    name, text = _read_text(path, what="ShareGPT file", display_name=display_name)
    entries = []
    for idx, (line, obj) in enumerate(_iter_json_array(text, file=name)):
        if not isinstance(obj, dict):
            raise ConfigError(f"element {idx} must be an object with \"conversations\", got "
                              f"{type(obj).__name__}", file=name, line=line)
        conv = obj.get("conversations", obj.get("conversation"))
        if not isinstance(conv, list):
            raise ConfigError(f"element {idx} needs \"conversations\": a list of {{\"from\", "
                              "\"value\"}} turns", file=name, line=line,
                              field=f"[{idx}].conversations")
        for t, turn in enumerate(conv):
            if not isinstance(turn, dict) or not isinstance(turn.get("from"), str) \
                    or not isinstance(turn.get("value"), str):
                raise ConfigError(f"element {idx}, turn {t} must be {{\"from\": str, \"value\": "
                                  f"str}}, got {json.dumps(turn)[:80]}", file=name, line=line,
                                  field=f"[{idx}].conversations[{t}]")
        pair = _first_exchange(conv)
        if pair is None:
            continue
        human, gpt = pair
        natural = max(1, round(len(gpt.split()) * TOKENS_PER_WORD))
        ident = obj.get("id")
        ident = str(ident) if ident is not None else f"{Path(name).stem}:{idx}"
        entries.append(_Entry(ident, human, None, natural, line))
    if not entries:
        raise ConfigError("ShareGPT file has no conversation with a human turn followed by a gpt "
                          "turn", file=name)
    return entries


def _first_exchange(conv: list[dict]) -> tuple[str, str] | None:
    for a, b in itertools.pairwise(conv):
        if a["from"].lower() in _HUMAN and b["from"].lower() in _GPT and a["value"].strip() \
                and b["value"].strip():
            return a["value"], b["value"]
    return None


def read_builtin() -> list[_Entry]:
    """The built-in prompt set shipped in ``autotune/data/prompts.jsonl``."""
    res = resources.files("autotune") / "data" / "prompts.jsonl"
    with resources.as_file(res) as p:
        return read_jsonl(p, display_name="autotune/data/prompts.jsonl")


#: The fewest prompts a production sample may hold: its p10 and p90 need ten to be other than its
#: shortest and longest prompt.
SAMPLE_MIN_PROMPTS = 10


def read_sample(path: str | Path) -> list[_Entry]:
    """A production sample's prompts, repeats kept (how often production repeats a prompt is part
    of its shape); see the module docstring for the formats.

    Raises:
        ConfigError: An unreadable or malformed file, or fewer than :data:`SAMPLE_MIN_PROMPTS` prompts.
    """
    p = Path(path)
    if p.name.endswith(".jsonl"):
        entries = read_jsonl(p)
    elif p.name.endswith(".json"):
        entries = read_sharegpt(p)
    else:
        name, text = _read_text(p, what="production sample", display_name=None)
        entries = [_Entry(f"{p.stem}:{n}", raw, None, None, n)
                   for n, raw in enumerate(text.splitlines(), start=1) if raw.strip()]
        if not entries:
            raise ConfigError("production sample has no prompts (one prompt a line)", file=name)
    if len(entries) < SAMPLE_MIN_PROMPTS:
        raise ConfigError(f"a production sample needs at least {SAMPLE_MIN_PROMPTS} prompts for its "
                          f"p10 and p90 prompt lengths, found {len(entries)}", file=str(p))
    return entries


def to_prompts(entries: list[_Entry], *, output_len: int | None, max_output_len: int,
               display: str) -> list[Prompt]:
    """Apply the output-length mode and drop repeated prompts (a repeat would hit the cache)."""
    seen: set[Any] = set()
    out = []
    for e in entries:
        if output_len is not None:
            max_tokens, ignore_eos = output_len, True
        else:
            if e.natural_tokens is None:
                raise ConfigError("natural output length (output_len: null) needs max_tokens on "
                                  "every prompt; add it or set workload.output_len",
                                  file=display, line=e.line, field="max_tokens")
            max_tokens, ignore_eos = min(e.natural_tokens, max_output_len), False
        key = e.text if e.text is not None else e.messages
        if key in seen:
            continue
        seen.add(key)
        out.append(Prompt(id=e.id, max_tokens=max_tokens, ignore_eos=ignore_eos, text=e.text,
                          messages=e.messages, kind=e.kind))
    return out
