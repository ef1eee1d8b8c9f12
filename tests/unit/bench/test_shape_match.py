"""The workload's prompts against a declared production sample (autotune.bench.shape_match)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.bench.shape_match import LENGTH_FACTOR, SHARE_POINTS, ShapeMatch, far_reasons, production_match
from autotune.bench.workload_shape import PREFIX_CHARS
from autotune.errors import ConfigError
from autotune.space.search_space import load_space
from autotune.space.workload import Workload, read_production_sample

SPACES = Path(__file__).resolve().parents[2] / "spaces"


def _stats(p50: float, p90: float, shared: float = 0.0, distinct: float = 100.0) -> dict[str, float]:
    return {"prompt_chars_p50": p50, "prompt_chars_p90": p90, "shared_prefix_pct": shared,
            "distinct_pct": distinct}


def test_the_rule_flags_each_statistic_at_its_bound_and_not_inside() -> None:
    sample = _stats(1000, 4000, shared=10, distinct=90)
    assert far_reasons(_stats(1000, 4000, shared=10, distinct=90), sample) == []
    # Exactly a factor LENGTH_FACTOR either way still matches; past it, it is far.
    assert far_reasons(_stats(1000 * LENGTH_FACTOR, 4000 / LENGTH_FACTOR, 10, 90), sample) == []
    (median,) = far_reasons(_stats(1000 * LENGTH_FACTOR * 1.01, 4000, 10, 90), sample)
    assert median.startswith("median prompt 2.02x the sample's (2020 vs 1000 chars")
    (p90,) = far_reasons(_stats(1000, 4000 / LENGTH_FACTOR * 0.99, 10, 90), sample)
    assert p90.startswith("p90 prompt 0.49x")
    assert far_reasons(_stats(1000, 4000, 10 + SHARE_POINTS, 90 - SHARE_POINTS), sample) == []
    shared, distinct = far_reasons(_stats(1000, 4000, 10 + SHARE_POINTS + 1, 90 - SHARE_POINTS - 1), sample)
    assert shared.startswith("prompts sharing a prefix 41% vs the sample's 10%")
    assert distinct.startswith("distinct prompts 59% vs the sample's 90%")


def test_an_unknown_statistic_is_not_compared() -> None:
    assert far_reasons(_stats(1000, 4000) | {"prompt_chars_p50": None}, _stats(1, 4000)) == []


def _sample(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in texts))
    return path


def _workload(tmp_path: Path, sample: Path, **spec: object) -> Workload:
    return Workload.from_spec({"source": "builtin", "num_prompts": 16, "warmup_prompts": 0, "output_len": 16,
                               "production_sample": sample.name, **spec}, base_dir=tmp_path)


def _match(tmp_path: Path, sample: Path) -> ShapeMatch | None:
    """The comparison as a search makes it: the sample parsed once, then compared."""
    workload = _workload(tmp_path, sample)
    return production_match(workload, read_production_sample(workload))


def test_the_builtin_prompts_match_themselves_and_not_a_shared_long_prompt_sample(tmp_path: Path) -> None:
    same = Workload.from_spec({"source": "builtin", "num_prompts": 16, "warmup_prompts": 0, "output_len": 16})
    texts = [p.text or "" for p in same.measured()]
    match = _match(tmp_path, _sample(tmp_path / "same.jsonl", texts))
    assert match is not None and not match.far and match.reasons == ()
    assert match.line().startswith("the workload's prompts match the production sample")
    assert match.space == match.production and match.production["prompts"] == 16
    # Production: one long shared document, asked about 40 times, repeats included.
    doc = "A shared contract clause about liability and indemnity. " * 100
    assert len(doc) > PREFIX_CHARS
    far = _match(tmp_path, _sample(tmp_path / "prod.jsonl", [doc + f"Question {i % 20}?" for i in range(40)]))
    assert far is not None and far.far
    assert far.production["shared_prefix_pct"] == 100.0 and far.production["distinct_pct"] == 50.0
    assert [r.split(" ")[0] for r in far.reasons] == ["median", "p90", "prompts", "distinct"]
    assert "far from the production sample" in far.line() and str(tmp_path / "prod.jsonl") in far.line()
    record = far.to_dict()
    assert record["far"] is True and record["metrics"]["production_sample_far"] == 1.0
    assert record["metrics"]["production_prompt_chars_p50_ratio"] < 1 / LENGTH_FACTOR


def test_a_text_sample_is_one_prompt_a_line(tmp_path: Path) -> None:
    path = tmp_path / "prod.txt"
    path.write_text("\n".join(f"short question {i}" for i in range(12)) + "\n\n")
    match = _match(tmp_path, path)
    assert match is not None and match.production["prompts"] == 12
    # Ten lines of 16 characters and two of 17 (questions 10 and 11); the blank lines are no prompts.
    assert match.production["prompt_chars_p50"] == 16.0
    assert match.production["prompt_chars_p90"] == pytest.approx(16.9)


def test_no_sample_no_match() -> None:
    assert production_match(Workload.from_spec({"source": "builtin", "num_prompts": 4}), None) is None


def _space_with_sample(folder: Path) -> tuple[Path, str]:
    """``slo.yaml`` written into ``folder`` with ``production_sample: prod.jsonl``: (path, text)."""
    text = (SPACES / "slo.yaml").read_text().replace(
        "workload: {source: builtin, num_prompts: 3, warmup_prompts: 1, output_len: 24, concurrency: 1, seed: 0}",
        "workload:\n  source: builtin\n  num_prompts: 3\n  production_sample: prod.jsonl\n"
    ).replace("profile: profile-slow-dense.yaml", f"profile: {SPACES / 'profile-slow-dense.yaml'}")
    space = folder / "space.yaml"
    space.write_text(text)
    return space, text


def test_bad_samples_say_file_line_and_field(tmp_path: Path) -> None:
    space, text = _space_with_sample(tmp_path)
    line = text.splitlines().index("  production_sample: prod.jsonl") + 1
    with pytest.raises(ConfigError, match="production sample not found") as err:
        load_space(space)
    assert (err.value.file, err.value.line, err.value.field) == (str(space), line, "workload.production_sample")
    _sample(tmp_path / "prod.jsonl", [f"q{i}" for i in range(9)])
    with pytest.raises(ConfigError, match="at least 10 prompts.*found 9") as err:
        load_space(space)
    (tmp_path / "prod.jsonl").write_text('{"prompt": "a"}\n{"prompt": 3}\n')
    with pytest.raises(ConfigError, match="prompt must be a non-empty string") as err:
        load_space(space)
    assert err.value.file == str(tmp_path / "prod.jsonl") and err.value.line == 2
    space.write_text(text.replace("production_sample: prod.jsonl", "production_sample: 7"))
    with pytest.raises(ConfigError, match="must be the path of a file") as err:
        load_space(space)
    assert err.value.field == "workload.production_sample" and err.value.line == line
    # Relative to the space file, and absolute once loaded: trials read it from other folders.
    _sample(tmp_path / "prod.jsonl", [f"question {i}" for i in range(10)])
    space.write_text(text)
    assert load_space(space).workload["production_sample"] == str(tmp_path / "prod.jsonl")


def test_only_the_space_load_reads_the_sample(tmp_path: Path) -> None:
    # Trials build their workload from the loaded space: a sample gone since then does not fail them.
    gone = Workload.from_spec({"source": "builtin", "num_prompts": 4, "production_sample": "gone.jsonl"},
                              base_dir=tmp_path)
    assert gone.production_sample == str(tmp_path / "gone.jsonl") and len(gone.measured()) == 4
    # The comparison works on the sample parsed at load: the file is not read again.
    sample = _sample(tmp_path / "prod.jsonl", [f"question {i}" for i in range(12)])
    workload = _workload(tmp_path, sample)
    parsed = read_production_sample(workload)
    sample.unlink()
    match = production_match(workload, parsed)
    assert match is not None and match.production["prompts"] == 12
    # A declared sample not passed on (or one passed for a workload without one) is a caller's error.
    with pytest.raises(ValueError, match="needs the parsed production sample exactly when"):
        production_match(workload, None)
    with pytest.raises(ValueError, match="needs the parsed production sample exactly when"):
        production_match(Workload.from_spec({"source": "builtin", "num_prompts": 4}), parsed)


def test_a_trial_process_loads_the_space_without_parsing_the_sample(tmp_path: Path) -> None:
    # The driver parses the sample once; a Ray trial process (autotune.search.trainable) loads the
    # space with production_sample=False, so a large sample is not read again by every worker.
    space, _ = _space_with_sample(tmp_path)
    _sample(tmp_path / "prod.jsonl", [f"question {i}" for i in range(10)])
    assert load_space(space).production_sample is not None
    (tmp_path / "prod.jsonl").write_text("not json at all\n")  # what parsing it would now refuse
    with pytest.raises(ConfigError):
        load_space(space)
    trial_side = load_space(space, production_sample=False)
    assert trial_side.production_sample is None
    assert trial_side.workload["production_sample"] == str(tmp_path / "prod.jsonl")
