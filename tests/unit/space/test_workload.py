"""Workload: built-in set, JSONL and ShareGPT files, errors with lines, seeded disjoint samples."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from autotune.data import make_prompts
from autotune.errors import ConfigError
from autotune.space.prompts import Prompt, read_jsonl, read_sharegpt
from autotune.space.workload import Workload, num_prompts_of


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(path: Path, rows: list) -> Path:
    return write(path, "".join(json.dumps(r) + "\n" for r in rows))


# ---------------------------------------------------------------------------------------------
# built-in set
# ---------------------------------------------------------------------------------------------


def test_builtin_set_is_the_generator_output_and_is_mixed():
    committed = Path(make_prompts.__file__).with_name("prompts.jsonl").read_text("utf-8")
    regenerated = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in make_prompts.build())
    assert committed == regenerated, "run python -m autotune.data.make_prompts"
    rows = [json.loads(line) for line in committed.splitlines()]
    cats = {r["category"] for r in rows}
    assert cats == {"chat", "code", "math"}
    assert len(rows) >= 300
    words = sorted(len((r.get("prompt") or " ".join(m["content"] for m in r["messages"])).split())
                   for r in rows)
    assert words[0] < 15 and words[-1] > 1000  # short questions and long pasted contexts
    assert any("messages" in r for r in rows)
    assert len({r["id"] for r in rows}) == len(rows)


def test_builtin_workload_fixed_length_defaults():
    wl = Workload.from_spec({"num_prompts": 32, "warmup_prompts": 4, "output_len": 128})
    measured, warm = wl.measured(), wl.warmup()
    assert len(measured) == 32 and len(warm) == 4
    assert all(p.max_tokens == 128 and p.ignore_eos for p in measured + warm)
    assert wl.source == "builtin" and wl.api == "generate" and wl.concurrency == 1
    assert wl.bench_kwargs() == {"api": "generate", "concurrency": 1, "request_rate": None,
                                 "max_duration_s": None, "seed": 0}


def test_builtin_workload_natural_length_uses_per_prompt_lengths():
    wl = Workload.from_spec({"num_prompts": 40, "output_len": None, "max_output_len": 300})
    lens = {p.max_tokens for p in wl.measured()}
    assert len(lens) > 1 and max(lens) <= 300
    assert not any(p.ignore_eos for p in wl.measured())


def test_seeded_sampling_is_reproducible_and_warmup_is_disjoint():
    spec = {"num_prompts": 50, "warmup_prompts": 10, "seed": 3}
    a, b = Workload.from_spec(spec), Workload.from_spec(spec)
    assert a.measured() == b.measured() and a.warmup() == b.warmup()
    c = Workload.from_spec({**spec, "seed": 4})
    assert [p.id for p in c.measured()] != [p.id for p in a.measured()]
    keys_m = {p.content_key() for p in a.measured()}
    keys_w = {p.content_key() for p in a.warmup()}
    assert len(keys_m) == 50 and len(keys_w) == 10 and not keys_m & keys_w


def test_workload_pickles():
    wl = Workload.from_spec({"num_prompts": 8})
    assert pickle.loads(pickle.dumps(wl)).measured() == wl.measured()


# ---------------------------------------------------------------------------------------------
# JSONL
# ---------------------------------------------------------------------------------------------


def test_jsonl_prompts_and_chats(tmp_path):
    jsonl(tmp_path / "p.jsonl", [
        {"prompt": "one", "max_tokens": 10},
        {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "two"}],
         "max_tokens": 20, "id": "chat-2"},
        {"prompt": "three", "max_tokens": 30, "extra": "ignored"},
        {"prompt": "one", "max_tokens": 99},  # a repeat: dropped
    ])
    wl = Workload.from_spec({"source": "jsonl", "path": "p.jsonl", "num_prompts": 2,
                             "warmup_prompts": 1, "output_len": None, "api": "chat"},
                            base_dir=tmp_path)
    allp = {p.id: p for p in wl.warmup() + wl.measured()}
    assert set(allp) == {"p:1", "chat-2", "p:3"}
    assert allp["chat-2"].messages == (("system", "s"), ("user", "two"))
    assert allp["chat-2"].max_tokens == 20 and not allp["chat-2"].ignore_eos
    assert allp["chat-2"].as_text().endswith("User: two\n\nAssistant:")
    assert allp["p:1"].as_messages() == [{"role": "user", "content": "one"}]


@pytest.mark.parametrize("lines, line_no, needle", [
    (['{"prompt": "ok"}', '{"prompt": "a", '], 2, "invalid JSON"),
    (['{"prompt": "ok"}', "", '[1, 2]'], 3, "JSON object"),
    (['{"prompt": "ok"}', '{"text": "x"}'], 2, "exactly one of"),
    (['{"prompt": "ok", "messages": []}'], 1, "exactly one of"),
    (['{"prompt": ""}'], 1, "non-empty string"),
    (['{"prompt": "ok"}', '{"prompt": "b", "max_tokens": 0}'], 2, "max_tokens"),
    (['{"prompt": "ok"}', '{"prompt": "b", "max_tokens": "64"}'], 2, "max_tokens"),
    (['{"messages": [{"role": "wizard", "content": "x"}]}'], 1, "role"),
    (['{"messages": [{"role": "user", "content": [{"type": "text"}]}]}'], 1, "content"),
    (['{"messages": [{"role": "system", "content": "only a system turn"}]}'], 1, "user turn"),
])
def test_jsonl_errors_name_file_and_line(tmp_path, lines, line_no, needle):
    path = write(tmp_path / "bad.jsonl", "\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as err:
        read_jsonl(path)
    assert err.value.file == str(path) and err.value.line == line_no
    assert needle in str(err.value) and f"bad.jsonl:{line_no}" in str(err.value)


def test_natural_length_requires_max_tokens_with_line(tmp_path):
    jsonl(tmp_path / "p.jsonl", [{"prompt": "a", "max_tokens": 5}, {"prompt": "b"}])
    with pytest.raises(ConfigError) as err:
        Workload.from_spec({"source": "jsonl", "path": str(tmp_path / "p.jsonl"),
                            "output_len": None, "num_prompts": 1, "warmup_prompts": 0})
    assert err.value.line == 2 and "output_len" in str(err.value)
    # fixed length does not need it
    wl = Workload.from_spec({"source": "jsonl", "path": str(tmp_path / "p.jsonl"),
                             "output_len": 7, "num_prompts": 2, "warmup_prompts": 0})
    assert {p.max_tokens for p in wl.measured()} == {7}


def test_empty_and_missing_files(tmp_path):
    with pytest.raises(ConfigError, match="no prompts"):
        read_jsonl(write(tmp_path / "e.jsonl", "\n\n"))
    with pytest.raises(ConfigError, match="not found") as err:
        Workload.from_spec({"source": "jsonl", "path": "nope.jsonl"}, base_dir=tmp_path,
                           file="space.yaml", lines={"path": 12})
    assert err.value.file == "space.yaml" and err.value.line == 12
    assert err.value.field == "workload.path"


def test_too_few_prompts_says_how_many(tmp_path):
    jsonl(tmp_path / "p.jsonl", [{"prompt": f"q{i}"} for i in range(5)])
    with pytest.raises(ConfigError, match="has 5 distinct prompts.*= 6"):
        Workload.from_spec({"source": "jsonl", "path": str(tmp_path / "p.jsonl"),
                            "num_prompts": 4, "warmup_prompts": 2})


# ---------------------------------------------------------------------------------------------
# ShareGPT
# ---------------------------------------------------------------------------------------------


def test_sharegpt_lengths_from_gpt_turn_and_skips(tmp_path):
    data = [
        {"id": "a", "conversations": [{"from": "human", "value": "What is 2+2?"},
                                      {"from": "gpt", "value": " ".join(["w"] * 100)}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "no human first"}]},
        {"id": "c", "conversations": [{"from": "system", "value": "s"},
                                      {"from": "human", "value": "Tell me a joke"},
                                      {"from": "gpt", "value": "one two three"},
                                      {"from": "human", "value": "again"}]},
        {"id": "d", "conversations": []},
    ]
    path = write(tmp_path / "sg.json", json.dumps(data, indent=2))
    entries = read_sharegpt(path)
    assert [(e.id, e.text, e.natural_tokens) for e in entries] == [
        ("a", "What is 2+2?", 130), ("c", "Tell me a joke", 4)]
    wl = Workload.from_spec({"source": "sharegpt", "path": str(path), "num_prompts": 2,
                             "warmup_prompts": 0, "output_len": None})
    assert sorted(p.max_tokens for p in wl.measured()) == [4, 130]


def test_sharegpt_errors_point_at_the_element_line(tmp_path):
    good = '  {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}'
    bad_turn = '  {"conversations": [{"from": "human", "value": 5}]}'
    path = write(tmp_path / "sg.json", "[\n" + good + ",\n" + good + ",\n" + bad_turn + "\n]\n")
    with pytest.raises(ConfigError) as err:
        read_sharegpt(path)
    assert err.value.line == 4 and "element 2, turn 0" in str(err.value)

    path = write(tmp_path / "sg2.json", "[\n" + good + ",\n  {\"conversations\": 3}\n]")
    with pytest.raises(ConfigError) as err:
        read_sharegpt(path)
    assert err.value.line == 3 and "conversations" in str(err.value)

    path = write(tmp_path / "sg3.json", "[\n" + good + ",\n" + good + "\n  {oops}\n]")
    with pytest.raises(ConfigError) as err:
        read_sharegpt(path)
    assert err.value.line == 4

    path = write(tmp_path / "sg4.json", '{"conversations": []}')
    with pytest.raises(ConfigError, match="JSON array"):
        read_sharegpt(path)

    path = write(tmp_path / "sg5.json", "[\n" + good + ",\n  {\"conversations\": [{\"from\"")
    with pytest.raises(ConfigError, match="invalid JSON") as err:
        read_sharegpt(path)
    assert err.value.line == 3


# ---------------------------------------------------------------------------------------------
# spec validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, field, needle", [
    ({"num_prompts": 0}, "num_prompts", ">= 1"),
    ({"num_prompts": 2.5}, "num_prompts", "integer"),
    ({"warmup_prompts": -1}, "warmup_prompts", ">= 0"),
    ({"output_len": True}, "output_len", "integer"),
    ({"source": "csv"}, "source", "builtin, jsonl, sharegpt"),
    ({"api": "completions"}, "api", "generate, chat"),
    ({"request_rate": -3}, "request_rate", "> 0"),
    ({"max_duration_s": 0}, "max_duration_s", "> 0"),
    ({"concurrency": None}, "concurrency", "request_rate"),
    ({"path": "x.jsonl"}, "path", "builtin takes no path"),
    ({"source": "jsonl"}, "path", "needs path"),
    ({"num_promts": 4}, "num_promts", "unknown key"),
])
def test_spec_errors_name_the_field(spec, field, needle):
    with pytest.raises(ConfigError) as err:
        Workload.from_spec(spec, file="s.yaml")
    assert err.value.field == f"workload.{field}" and needle in str(err.value)
    assert str(err.value).startswith("s.yaml")


def test_rate_only_load_shape_is_allowed():
    wl = Workload.from_spec({"concurrency": None, "request_rate": 4, "num_prompts": 4})
    assert wl.bench_kwargs()["request_rate"] == 4.0 and wl.concurrency is None


def test_prompt_validation():
    with pytest.raises(ValueError):
        Prompt(id="x", max_tokens=5, ignore_eos=True)
    with pytest.raises(ValueError):
        Prompt(id="x", max_tokens=0, ignore_eos=True, text="t")


# ---------------------------------------------------------------------------------------------
# concurrency levels (per-concurrency answers)
# ---------------------------------------------------------------------------------------------


def test_a_single_concurrency_has_one_level_and_no_level_keys():
    wl = Workload.from_spec({"concurrency": 8, "num_prompts": 4})
    assert wl.levels() == [wl] and wl.concurrency_levels is None
    assert "primary_concurrency" not in wl.to_dict() and wl.to_dict()["concurrency"] == 8


def test_concurrency_levels_keep_order_prompts_and_a_primary():
    wl = Workload.from_spec({"concurrency": [64, 1, 8], "num_prompts": 4})
    # The primary level defaults to the first one written; bench_kwargs drives it.
    assert wl.concurrency == 64 and wl.bench_kwargs()["concurrency"] == 64
    levels = wl.levels()
    assert [lv.concurrency for lv in levels] == [64, 1, 8]
    assert all(lv.concurrency_levels is None and lv.measured() == wl.measured() for lv in levels)
    assert wl.to_dict()["concurrency"] == [64, 1, 8] and wl.to_dict()["primary_concurrency"] == 64
    chosen = Workload.from_spec({"concurrency": [1, 8, 64], "primary_concurrency": 8,
                                 "num_prompts": 4})
    assert chosen.concurrency == 8 and chosen.concurrency_levels == (1, 8, 64)
    assert pickle.loads(pickle.dumps(chosen)) == chosen


@pytest.mark.parametrize("spec, field, needle", [
    ({"concurrency": []}, "concurrency", "empty list"),
    ({"concurrency": [1, 8, 1]}, "concurrency[2]", "listed twice"),
    ({"concurrency": [1, 0]}, "concurrency[1]", "from 1 to 4096"),
    ({"concurrency": [1, 2.5]}, "concurrency[1]", "integer"),
    ({"concurrency": [True, 2]}, "concurrency[0]", "integer"),
    ({"concurrency": [1, 5000]}, "concurrency[1]", "4096"),
    ({"concurrency": list(range(1, 10))}, "concurrency", "at most 8"),
    ({"concurrency": [1, 8], "primary_concurrency": 4}, "primary_concurrency", "[1, 8]"),
    ({"concurrency": 8, "primary_concurrency": 8}, "primary_concurrency", "list"),
])
def test_concurrency_level_errors_name_the_item(spec, field, needle):
    with pytest.raises(ConfigError) as err:
        Workload.from_spec(spec, file="s.yaml", lines={"concurrency": 3, "concurrency[1]": 5})
    assert err.value.field == f"workload.{field}" and needle in str(err.value), str(err.value)
    assert err.value.line == {"concurrency": 3, "concurrency[1]": 5}.get(field)


def test_primary_concurrency_without_loading_prompts():
    from autotune.space.workload import primary_concurrency

    assert primary_concurrency({}) == 1 and primary_concurrency({"concurrency": 8}) == 8
    assert primary_concurrency({"concurrency": None, "request_rate": 2}) is None
    assert primary_concurrency({"concurrency": [64, 1]}) == 64
    assert primary_concurrency({"concurrency": [1, 8], "primary_concurrency": 8}) == 8
    with pytest.raises(ConfigError, match="listed twice"):
        primary_concurrency({"concurrency": [1, 1]})


def test_an_unwritten_num_prompts_holds_six_waves_of_the_largest_concurrency(tmp_path):
    from autotune.space.workload import MIN_NUM_PROMPTS, WINDOW_WAVES

    def num(**spec):
        return Workload.from_spec({"source": "builtin", "output_len": 8, **spec}).num_prompts

    assert WINDOW_WAVES == 6 and num(concurrency=1) == num(concurrency=10) == MIN_NUM_PROMPTS == 64
    assert num(concurrency=16) == 96 and num(concurrency=[1, 16, 48]) == 288
    assert num(request_rate=4.0) == num(request_rate=4.0, concurrency=32) == 64  # open loop: no waves
    assert num(concurrency=64, num_prompts=32) == 32  # written: as written
    # A file too small for the sizing says where the number came from.
    jsonl(tmp_path / "p.jsonl", [{"prompt": f"q{i}"} for i in range(80)])
    with pytest.raises(ConfigError, match=r"= 100 \(num_prompts, not written, is 6 waves of the largest"):
        Workload.from_spec({"source": "jsonl", "path": str(tmp_path / "p.jsonl"), "concurrency": 16})


@pytest.mark.parametrize(("spec", "runs"), [
    ({}, 64), ({"concurrency": 16}, 96), ({"concurrency": 64}, 384), ({"concurrency": [1, 16, 48]}, 288),
    ({"concurrency": [4, 32], "primary_concurrency": 4}, 192), ({"request_rate": 4.0}, 64),
    ({"request_rate": 4.0, "concurrency": 32}, 64), ({"request_rate": [2, 8]}, 64),
    ({"concurrency": 64, "num_prompts": 32}, 32),
])
def test_the_modelled_num_prompts_is_what_the_workload_runs(spec, runs):
    """num_prompts_of (for models such as bench_search's GPU time: no prompts loaded) gives the
    number a built workload sends: 6 waves of the largest closed-loop concurrency, at least 64, or
    as written."""
    assert num_prompts_of(spec) == runs
    assert Workload.from_spec({"source": "builtin", "output_len": 8, **spec}).num_prompts == runs
