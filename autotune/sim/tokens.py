"""A fake tokenizer and detokenizer for the SGLang emulator.

Nothing here is a real vocabulary. Prompts are counted at about four characters a token (what BPE
tokenizers give on English text), and generated token ids are turned into readable words from a
fixed list, so streamed text grows the way a real server's does. Everything is deterministic and
cheap: it sits on the streaming path.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

EOS_TOKEN_ID = 2
"""The id reported as ``matched_stop`` when a request ends on its own (finish reason ``stop``)."""

_WORDS = (  # noqa: SIM905 - a word list reads better as text
    "the of and to in is that for it as was with be by on not he this are or his from at which but "
    "have an they you were her she there been one all we their has would when if so no will more can "
    "out up into do about than other time some could them these its only two may first then any like "
    "over such our new most also made after did many before must well through back years where much "
    "your way down should because each just those people how too state good very make world still own "
    "see men work long get here between both life being under never day same another know while last "
    "might us great old year off come since against go came right used take three states himself few "
    "house use during without again place american around however home small found thought went say "
    "part once general high upon school every does got united left number course war until always "
    "away something fact though water less public put think almost hand enough far took head yet "
    "government system better set told nothing night end why called eyes find going look asked later "
    "knew point next program city business give group toward young days let room president side "
    "social given present several order national possible rather second face per among form important "
    "often things looked early white case john become large big need four within felt along children "
    "saw best church ever least power development light thing seemed family interest want members "
    "mind country area others done turned although open god service problem certain kind different "
    "thus began door help means sense whole matter perhaps itself york times law human line above "
    "name example action company hands local show whether five"
).split()

# Each token decodes to a word with its leading space, the way byte-level BPE pieces look.
VOCAB: tuple[str, ...] = tuple(" " + w for w in _WORDS) + (".", ",", "\n")
_N = len(VOCAB)


def count_tokens(text: str) -> int:
    """Number of prompt tokens a real tokenizer would roughly give for ``text`` (at least 1)."""
    return max(1, math.ceil(len(text) / 4))


def detokenize(token_ids: Sequence[int]) -> str:
    """Text for generated token ids. Any int is a valid id; the same ids give the same text."""
    vocab = VOCAB
    n = _N
    return "".join([vocab[t % n] for t in token_ids])


def prompt_text_from_ids(input_ids: Sequence[int]) -> str:
    """A stand-in prompt string for a request given as token ids (for per-prompt acceptance)."""
    return detokenize(input_ids)


def _content_text(content: Any) -> str:
    """The text of an OpenAI message ``content``: a string or a list of typed parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    raise ValueError(f"message content must be a string or a list of parts, got {type(content).__name__}")


def apply_chat_template(messages: Iterable[Any]) -> str:
    """Render chat messages into one prompt string with a ChatML-like template.

    Raises:
        ValueError: a message that is not an object with a string ``role``.
    """
    out: list[str] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            # A bad request body: answered 400, like SGLang's own validation.
            raise ValueError(f"messages[{i}] must be an object with a string 'role'")  # noqa: TRY004
        out.append(f"<|im_start|>{msg['role']}\n{_content_text(msg.get('content'))}<|im_end|>\n")
    out.append("<|im_start|>assistant\n")
    return "".join(out)
