"""Cases of ``workload.source: sglang:<dataset>[:<category>]`` through SGLang's own loaders (the
installed SGLang's ``sglang.benchmark.datasets``, a real local tokenizer, real files).

SGLang's loaders need ``transformers``, which makes importing SGLang's argument parser several
times slower, so the main test environment goes without it; these cases run under the environment
that ``make test`` builds beside it (``.venv-sglang-data``: the main one plus SGLang's dataset
dependencies), started by ``tests/unit/sglang/test_sglang_datasets.py``.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.space.search_space import load_space
from autotune.space.workload import Workload
from tests.data_venv import word_level_tokenizer

CATEGORIES = ("low_entropy", "mixed", "high_entropy")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The word-level tokenizer the GPU kit's dummy models use (scripts/gpu/make_models.py)."""
    return word_level_tokenizer(tmp_path_factory.mktemp("tok"), 512)


@pytest.fixture()
def speed_bench(tmp_path: Path) -> Path:
    path = tmp_path / "speed.jsonl"
    path.write_text("".join(
        # Words of the tokenizer's vocabulary, so the loader's decoded prompt keeps them.
        json.dumps({"category": CATEGORIES[i % 3], "turns": [f"w{100 + i} w{200 + i} w6"]}) + "\n"
        for i in range(30)))
    return path


def space_file(tmp_path: Path, workload: str, *, model_path: str = "sim/Llama-3.1-8B-Instruct") -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: datasets
        backend: sim
        profile: llama-3.1-8b-eagle3-h100
        model_path: {model_path}
        draft_model_path: sim/EAGLE3-LLaMA3.1-Instruct-8B
        fixed_args: {{speculative_algorithm: EAGLE3, speculative_eagle_topk: 1}}
        parameters:
          speculative_num_steps: {{type: int, low: 1, high: 4}}
          speculative_num_draft_tokens: {{type: int, low: 2, high: 5}}
        workload: {workload}
        """))
    return path


def test_speed_bench_category_through_sglangs_loader(tmp_path: Path, tokenizer: Path,
                                                     speed_bench: Path) -> None:
    space = load_space(str(space_file(tmp_path, (
        f"{{source: 'sglang:speed-bench:low_entropy', path: {speed_bench}, tokenizer: {tokenizer}, "
        "num_prompts: 6, warmup_prompts: 2, output_len: 64}"))))
    w = Workload.from_spec(space.workload, file=space.file)
    prompts = w.warmup() + w.measured()
    assert len(prompts) == 8 and len(w.measured()) == 6
    low = {f"w{100 + i}" for i in range(0, 30, 3)}
    assert all(set(p.text.split()) & low for p in prompts)  # only that category's rows
    assert all(p.max_tokens == 64 and p.ignore_eos for p in prompts)
    assert len({p.text for p in prompts}) == 8  # distinct: a repeat would hit the prefix cache
    # The data's own length without output_len: SPEED-Bench's fixed 512, capped by max_output_len.
    natural = Workload.from_spec({**space.workload, "output_len": None, "max_output_len": 300},
                                 file=space.file)
    assert {p.max_tokens for p in natural.measured()} == {300}
    assert not any(p.ignore_eos for p in natural.measured())


def test_sharegpt_file_and_the_model_path_as_tokenizer(tmp_path: Path, tokenizer: Path) -> None:
    data = tmp_path / "sharegpt.json"
    data.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": f"tell me about w{i} " + "w7 " * 5},
                           {"from": "gpt", "value": "w8 " * (10 + i)}]} for i in range(12)]))
    space = load_space(str(space_file(
        tmp_path, f"{{source: 'sglang:sharegpt', path: {data}, num_prompts: 4, warmup_prompts: 1, output_len: null}}",
        model_path=str(tokenizer))))
    assert space.workload["tokenizer"] == str(tokenizer)  # the model's own tokenizer by default
    w = Workload.from_spec(space.workload, file=space.file)
    # Each request asks for its reply's length in the model's tokens (w8 is one token).
    assert all(10 <= p.max_tokens < 22 and not p.ignore_eos for p in w.measured())
    assert all(p.text.startswith("tell me about") for p in w.measured())


@pytest.mark.parametrize("workload, field, words", [
    ("{source: 'sglang:mmlu', path: X}", "workload.source", "sglang:speed-bench, sglang:sharegpt, sglang:custom"),
    ("{source: 'sglang:speed-bench:noisy', path: X}", "workload.source", "low_entropy, mixed, high_entropy"),
    ("{source: 'sglang:sharegpt:mixed', path: X}", "workload.source", "takes none"),
    ("{source: 'sglang:speed-bench', path: X, api: chat}", "workload.api", "use api: generate"),
    ("{source: 'sglang:speed-bench', path: X, tokenizer: /nonexistent/tok}", "workload.source",
     "set workload.tokenizer"),
    ("{source: builtin, tokenizer: T}", "workload.tokenizer", "only a source sglang:<dataset>"),
    ("{source: 'sglang:speed-bench'}", "workload.path", "needs path"),
])
def test_bad_sources_name_the_line_and_what_would_work(tmp_path: Path, speed_bench: Path, tokenizer: Path,
                                                       workload: str, field: str, words: str) -> None:
    path = space_file(tmp_path, workload.replace("path: X", f"path: {speed_bench}")
                      .replace("tokenizer: T", f"tokenizer: {tokenizer}"))
    with pytest.raises(ConfigError) as info:
        load_space(str(path))
    err = info.value
    assert err.field == field and err.file == str(path)
    assert (err.line is not None) == (field.split(".")[1] in workload)  # a key that is there: its line
    assert words in str(err)


def test_without_sglangs_loaders_the_error_says_what_to_use(
        tmp_path: Path, speed_bench: Path, tokenizer: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A machine without SGLang: its dataset package cannot be imported.
    monkeypatch.setitem(sys.modules, "sglang.benchmark.datasets", None)
    path = space_file(tmp_path, f"{{source: 'sglang:speed-bench', path: {speed_bench}, tokenizer: {tokenizer}}}")
    with pytest.raises(ConfigError) as info:
        load_space(str(path))
    assert info.value.field == "workload.source"
    assert "not importable" in str(info.value) and "source: jsonl" in str(info.value)
