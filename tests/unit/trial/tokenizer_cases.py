"""Cases of the prefill bound with real tokenizers (``autotune.trial.prefill_bound``): the
``tokenizers`` library and ``transformers``' ``AutoTokenizer`` (what SGLang's tokenizer manager
loads), which only the environment beside the main one has (``.venv-sglang-data``); started by
``tests/unit/trial/test_prefill_bound.py``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from autotune.sglang.trial_start import covering_prefill_max_tokens
from autotune.space.search_space import load_space
from autotune.space.workload import Workload
from autotune.trial.measure import launch_spec
from autotune.trial.measure_settings import settings_for
from autotune.trial.prefill_bound import SPECIAL_TOKENS, prefill_token_bound, request_token_bound, token_counter
from tests.data_venv import word_level_tokenizer

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def word_level(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The word-level tokenizer of the GPU kit's dummy models (scripts/gpu/make_models.py)."""
    return word_level_tokenizer(tmp_path_factory.mktemp("tok"), 512)


@pytest.fixture(scope="module")
def bytes_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE without merges, with a BOS: the most tokens any byte-level BPE gives a text."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {"<s>": 0, **{c: i + 1 for i, c in enumerate(sorted(alphabet))}}
    tok = Tokenizer(models.BPE(vocab, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    folder = tmp_path_factory.mktemp("bytes")
    tok.save(str(folder / "tokenizer.json"))
    return folder


def _workload() -> Workload:
    # The H200 8B space's workload (scripts/gpu/h200-llama-8b.yaml): 4 x 768 tokens at concurrency 1.
    return Workload.from_spec(load_space(REPO / "scripts/gpu/h200-llama-8b.yaml").workload)


def test_sglangs_own_tokenizer_never_counts_more_than_the_bound(word_level, bytes_only):
    from transformers import AutoTokenizer

    workload = _workload()
    for folder in (word_level, bytes_only):
        count = token_counter(str(folder))
        assert count is not None
        hf = AutoTokenizer.from_pretrained(str(folder))  # what SGLang's get_tokenizer loads
        for prompt in [*workload.warmup(), *workload.measured()]:
            text = prompt.as_text()
            served = len(hf(text)["input_ids"])
            assert served <= request_token_bound(prompt, count) - prompt.max_tokens, (folder.name, prompt.id)
            assert served <= request_token_bound(prompt) - prompt.max_tokens  # the byte bound holds too
            assert count(text) <= served + SPECIAL_TOKENS


def test_the_byte_bound_is_the_byte_level_worst_case(bytes_only):
    count = token_counter(str(bytes_only))
    assert count is not None
    for prompt in _workload().measured():
        text = prompt.as_text()
        assert count(text) == len(text.encode()) + 1  # one token a byte, and the BOS
        assert request_token_bound(prompt, count) == request_token_bound(prompt) + 1


def test_a_trial_with_a_local_tokenizer_caps_prefill_graphs_from_exact_counts(word_level, tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: tokenized
        backend: sim
        profile: llama-3.1-8b-eagle3-h100
        model_path: {word_level}
        draft_model_path: sim/EAGLE3-LLaMA3.1-Instruct-8B
        fixed_args: {{tp_size: 1, mem_fraction_static: 0.6, speculative_algorithm: EAGLE3, speculative_eagle_topk: 1}}
        parameters:
          speculative_num_steps: {{type: categorical, choices: [3]}}
        workload: {{source: builtin, num_prompts: 4, warmup_prompts: 4, output_len: 768, concurrency: 1, seed: 0}}
        objective: {{metric: output_tok_s}}
        """))
    space = load_space(path)
    workload = Workload.from_spec(space.workload, file=space.file)
    exact = prefill_token_bound(workload, count=token_counter(str(word_level)))
    by_bytes = prefill_token_bound(workload)
    assert exact is not None and by_bytes is not None and exact < by_bytes
    spec = launch_spec(space.trial_config({"speculative_num_steps": 3}), settings_for(space), workload=workload)
    assert spec.server_args["cuda_graph_max_bs_prefill"] == covering_prefill_max_tokens(exact)
    assert "cuda_graph_max_bs_prefill" in spec.trial_only
