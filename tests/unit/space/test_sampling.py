"""workload.sample: the default uniform draw, and the built-in set stratified by kind."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.space.prompts import read_builtin, to_prompts
from autotune.space.search_space import load_space
from autotune.space.workload import Workload

EXAMPLES = Path(__file__).resolve().parents[3] / "autotune" / "space" / "examples"


def _pool() -> Counter:
    """How many built-in prompts of each kind there are (chat, code, math)."""
    path = Path(__file__).resolve().parents[3] / "autotune" / "data" / "prompts.jsonl"
    return Counter(json.loads(line)["category"] for line in path.read_text("utf-8").splitlines())


@pytest.mark.parametrize("num", [1, 3, 5, 8, 16, 31, 64])
def test_stratified_counts_follow_the_kinds_shares(num):
    pool = _pool()
    total = sum(pool.values())
    wl = Workload.from_spec({"num_prompts": num, "warmup_prompts": 2, "sample": "stratified"})
    got = Counter(p.kind for p in wl.measured())
    assert sum(got.values()) == num
    for kind, n in pool.items():
        # Smooth weighted round-robin: every kind within one prompt of its proportional share.
        assert abs(got[kind] - num * n / total) < 1, (kind, got)
    if num >= len(pool):
        assert set(got) == set(pool)
    # Kinds alternate: no kind is dealt more than twice in a row (chat, the largest, is 46%).
    kinds = [p.kind for p in wl.measured()]
    assert all(len(set(kinds[i:i + 3])) > 1 for i in range(len(kinds) - 2))


def test_stratified_is_deterministic_per_seed_and_disjoint():
    spec = {"num_prompts": 12, "warmup_prompts": 3, "sample": "stratified"}
    a, b = Workload.from_spec(spec), Workload.from_spec(spec)
    assert [p.id for p in a.measured()] == [p.id for p in b.measured()]
    assert [p.id for p in a.warmup()] == [p.id for p in b.warmup()]
    assert not {p.id for p in a.warmup()} & {p.id for p in a.measured()}
    other = Workload.from_spec({**spec, "seed": 1})
    assert [p.id for p in other.measured()] != [p.id for p in a.measured()]
    assert Counter(p.kind for p in other.measured()) == Counter(p.kind for p in a.measured())
    assert a.to_dict()["sample"] == "stratified"


def test_default_stays_the_uniform_draw():
    # The figures the project prints were made with the uniform draw: it must not move.
    spec = {"num_prompts": 16, "warmup_prompts": 1, "seed": 0}
    default, explicit = Workload.from_spec(spec), Workload.from_spec({**spec, "sample": "random"})
    assert [p.id for p in default.measured()] == [p.id for p in explicit.measured()]
    assert "sample" not in default.to_dict()
    # The draw before ``sample`` existed, written out: one uniform sample of warm-up + measured.
    prompts = to_prompts(read_builtin(), output_len=256, max_output_len=2048, display="builtin")
    picks = random.Random(0).sample(range(len(prompts)), 17)
    assert [p.id for p in default.warmup()] == [prompts[picks[0]].id]
    assert [p.id for p in default.measured()] == [prompts[i].id for i in picks[1:]]


def test_bad_sample_names_the_allowed_values_file_and_line(tmp_path):
    text = (EXAMPLES / "demo.yaml").read_text()
    assert "  seed: 0\n" in text
    space = tmp_path / "s.yaml"
    space.write_text(text.replace("  seed: 0\n", "  seed: 0\n  sample: stratifed\n", 1))
    line = space.read_text().splitlines().index("  sample: stratifed") + 1
    with pytest.raises(ConfigError) as err:
        load_space(space)
    assert err.value.file == str(space) and err.value.line == line
    assert err.value.field == "workload.sample"
    assert "random, stratified" in str(err.value) and "'stratifed'" in str(err.value)


def test_stratified_needs_a_kind_on_every_prompt(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "category": "a"}) + "\n" for i in range(3))
                    + json.dumps({"prompt": "no kind"}) + "\n")
    spec = {"source": "jsonl", "path": str(path), "num_prompts": 2, "warmup_prompts": 0,
            "sample": "stratified"}
    with pytest.raises(ConfigError, match="needs a \"category\"") as err:
        Workload.from_spec(spec)
    assert err.value.field == "workload.sample"
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "category": "ab"[i % 2]}) + "\n"
                            for i in range(6)))
    wl = Workload.from_spec(spec)
    assert sorted(p.kind for p in wl.measured()) == ["a", "b"]
