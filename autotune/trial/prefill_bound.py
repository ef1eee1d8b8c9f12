"""The most tokens one prefill forward of a trial's server can hold, from the trial's own prompts.

The lean start caps the prefill CUDA-graph capture at a size that covers it
(:func:`autotune.sglang.trial_start.covering_prefill_max_tokens`), so the bound must never be
short:

- **A prompt's tokens**, where the server's tokenizer is a local ``tokenizer.json`` and the
  ``tokenizers`` library (SGLang's own dependency) is installed, are counted with it
  (:func:`token_counter`: the file SGLang's fast tokenizer loads), plus :data:`SPECIAL_TOKENS`
  for what the server's tokenizer may add around it (BOS, a template-free prefix). Otherwise they
  are at most the UTF-8 bytes of the text (the larger of the text as sent and its NFKC form, the
  normaliser that can lengthen text), plus :data:`SPECIAL_TOKENS`: every tokenizer SGLang serves,
  a byte-level BPE (Llama 3, Qwen, DeepSeek, Kimi), a SentencePiece with byte fallback or a
  word-level one, covers at least one byte, or one character, of its normalised input with each
  ordinary token.
- **A request** may be prefilled again with its whole output so far when SGLang retracts it under
  KV pressure, so it counts its prompt plus its ``max_tokens``.
- **A forward** holds at most one prefill of each request in flight: the ``concurrency`` largest
  requests of the workload (warm-up prompts included), at the level that allows most.

Only SGLang's native ``/generate`` API, whose text is what the server tokenizes: the chat API adds
the model's chat template on the server, which this bound does not know (None).
"""

from __future__ import annotations

import functools
import os
import unicodedata
from collections.abc import Callable

from autotune.space.prompts import Prompt
from autotune.space.workload import Workload

__all__ = ["SPECIAL_TOKENS", "TOKENIZER_FILE", "prefill_token_bound", "request_token_bound", "token_counter"]

#: Tokens a tokenizer may add to a prompt besides those of its text.
SPECIAL_TOKENS = 16
#: The file of a fast tokenizer in a model folder (what SGLang's ``AutoTokenizer`` loads).
TOKENIZER_FILE = "tokenizer.json"

Counter = Callable[[str], int]


@functools.lru_cache(maxsize=4)
def _load(path: str) -> Counter | None:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception:  # noqa: BLE001 - an unreadable tokenizer is one this bound does not use
        return None
    return lambda text: len(tokenizer.encode(text, add_special_tokens=True).ids)


def token_counter(folder: str | None) -> Counter | None:
    """Exact token counts with the fast tokenizer in ``folder`` (a local model or tokenizer
    folder), loaded once per process; None where there is none, or no ``tokenizers`` library."""
    if not folder or not os.path.isfile(path := os.path.join(folder, TOKENIZER_FILE)):
        return None
    return _load(os.path.realpath(path))


def request_token_bound(prompt: Prompt, count: Counter | None = None) -> int:
    """The most tokens one prefill of ``prompt``'s request can hold (prompt and whole output),
    with ``count`` the server's tokenizer where known (else the byte bound)."""
    text = prompt.as_text()
    if count is not None:
        size = count(text)
    else:
        size = max(len(text.encode("utf-8")), len(unicodedata.normalize("NFKC", text).encode("utf-8")))
    return size + SPECIAL_TOKENS + prompt.max_tokens


def prefill_token_bound(workload: Workload, *, count: Counter | None = None) -> int | None:
    """The most tokens one prefill forward of a trial running ``workload`` can hold; None where
    unknown: the chat API, or a level without a concurrency cap."""
    if workload.api != "generate":
        return None
    bounds = sorted((request_token_bound(p, count) for p in [*workload.warmup(), *workload.measured()]),
                    reverse=True)
    if not bounds:
        return None
    most = 0
    for level in workload.levels():
        if level.concurrency is None:
            return None
        most = max(most, sum(bounds[:level.concurrency]))
    return most
