"""autotune.trial.prefill_bound: the most tokens one prefill forward of a trial can hold."""

from __future__ import annotations

import pytest

from autotune.space.prompts import Prompt
from autotune.space.workload import Workload
from autotune.trial.prefill_bound import SPECIAL_TOKENS, prefill_token_bound, request_token_bound, token_counter
from tests.data_venv import run_cases


def _prompt(text: str, max_tokens: int = 10) -> Prompt:
    return Prompt(id="p", max_tokens=max_tokens, ignore_eos=True, text=text)


def test_a_request_counts_its_bytes_its_special_tokens_and_its_whole_output():
    assert request_token_bound(_prompt("abc", 10)) == 3 + SPECIAL_TOKENS + 10
    # Multi-byte characters: a byte-level tokenizer may spend a token on each byte.
    assert request_token_bound(_prompt("é", 1)) == 2 + SPECIAL_TOKENS + 1
    # NFKC can lengthen text (one ligature character, 3 bytes, becomes "ffi"; U+FDFA becomes 18
    # characters): the longer form counts.
    assert request_token_bound(_prompt("\ufb03", 1)) == 3 + SPECIAL_TOKENS + 1
    assert request_token_bound(_prompt("\ufdfa", 1)) > len("\ufdfa".encode()) + SPECIAL_TOKENS + 1
    chat = Prompt(id="c", max_tokens=5, ignore_eos=True, messages=(("user", "hi"),))
    assert request_token_bound(chat) == len(chat.as_text().encode()) + SPECIAL_TOKENS + 5


def test_a_forward_holds_the_largest_requests_that_can_be_in_flight_together():
    workload = Workload.from_spec({"source": "builtin", "num_prompts": 6, "warmup_prompts": 2, "output_len": 32,
                                   "concurrency": [1, 3], "seed": 0})
    every = sorted((request_token_bound(p) for p in [*workload.warmup(), *workload.measured()]), reverse=True)
    assert len(every) == 8
    # The widest level: its 3 largest requests, warm-up prompts included (they are sent too).
    assert prefill_token_bound(workload) == sum(every[:3])
    single = Workload.from_spec({"source": "builtin", "num_prompts": 6, "warmup_prompts": 2, "output_len": 32,
                                 "concurrency": 1, "seed": 0})
    assert prefill_token_bound(single) == every[0]


def test_no_counter_without_a_local_fast_tokenizer(tmp_path):
    assert token_counter(None) is None and token_counter("sim/Llama-3.1-8B-Instruct") is None
    assert token_counter(str(tmp_path)) is None  # a folder without tokenizer.json
    (tmp_path / "tokenizer.json").write_text("{not json")
    assert token_counter(str(tmp_path)) is None  # unreadable (or no tokenizers library): the byte bound


def test_unknown_for_the_chat_api_and_an_open_loop_rate():
    chat = Workload.from_spec({"source": "builtin", "num_prompts": 2, "api": "chat", "concurrency": 1})
    assert prefill_token_bound(chat) is None  # the server adds a chat template this bound does not know
    rate = Workload.from_spec({"source": "builtin", "num_prompts": 2, "request_rate": 4.0})
    assert prefill_token_bound(rate) is None  # no cap on what is in flight


@pytest.mark.slow  # a second interpreter that imports transformers
def test_with_real_tokenizers_in_the_environment_that_has_them() -> None:
    """``tokenizer_cases.py``: the ``tokenizers`` library and ``transformers``' AutoTokenizer
    (SGLang's), which only ``.venv-sglang-data`` has (``make test`` builds it)."""
    run_cases("tests/unit/trial/tokenizer_cases.py")
