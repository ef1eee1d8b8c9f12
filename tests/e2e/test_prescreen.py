"""nccl_prescreen: the space section, narrowing to kept candidates, and real searches that probe
first (the emulator's modelled NCCL latency through a Ray task; a failing gloo probe that must
stop the search), logging to the MLflow parent run.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ConfigError
from autotune.figures import shown
from autotune.search.options import SearchOptions
from autotune.search.prescreen import NARROWED_NAME, PrescreenError, narrowed_data
from autotune.search.run import run_search
from autotune.simtools.evaluate import ModelEvaluator
from autotune.space.nccl_candidates import candidates_from_space
from autotune.space.search_space import SearchSpace, load_space
from autotune.tracking.tracker import Tracker

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "tests" / "spaces" / "profile-slow-dense.yaml"

SPACE = """\
name: __NAME__
backend: sim
profile: __PROFILE__
model_path: sim/Llama-3.1-8B-Instruct
draft_model_path: sim/EAGLE3-LLaMA3.1-Instruct-8B
fixed_args:
  speculative_algorithm: EAGLE3
  speculative_eagle_topk: 1
  speculative_num_steps: 3
  tp_size: 2
  # NCCL carries the all-reduces only when SGLang's custom all-reduce is off.
  disable_custom_all_reduce: true
fixed_env: {NCCL_NVLS_ENABLE: "0"}
parameters:
  NCCL_ALGO: {type: categorical, choices: [null, Ring, Tree]}
  NCCL_PROTO: {type: categorical, choices: [null, LL, Simple]}
  NCCL_MAX_NCHANNELS: {type: categorical, choices: [null, 4]}
forbidden:
  env: {NCCL_NVLS_ENABLE: ["1"]}
nccl_prescreen: __PRESCREEN__
workload: {source: builtin, num_prompts: 2, warmup_prompts: 1, output_len: 16, concurrency: 1, seed: 0}
measure: {repeats: 1, startup_timeout_s: 60}
budget: {trials: 2}
resources: {cpus_per_trial: 1}
search: {sampler: tpe, seed: 0, finalists: 1, finalist_repeats: 1, max_concurrent: 1}
"""


def _space(tmp_path: Path, prescreen: str, *, name: str = "nccl-prescreen-test") -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(SPACE.replace("__NAME__", name).replace("__PROFILE__", str(PROFILE))
                    .replace("__PRESCREEN__", prescreen))
    return path


# ---- the section and narrowing ------------------------------------------------------------------

def test_kept_candidates_narrow_the_nccl_parameters(tmp_path: Path) -> None:
    full = load_space(_space(tmp_path, "{keep: 2}"))
    assert full.nccl_bundle is None and full.count() == 3 * 3 * 2
    assert full.nccl_prescreen.keep == 2 and full.nccl_prescreen.tokens == (1, 4, 8, 64)

    space = load_space(_space(tmp_path, '{keep: 2, kept: ["NCCL_PROTO=LL,NCCL_ALGO=Ring", default]}'))
    assert list(space.nccl_bundle) == ["NCCL_ALGO=Ring,NCCL_PROTO=LL", "default"]  # canonical names
    configs = list(space.enumerate())
    assert len(configs) == 2
    assert {(c["NCCL_ALGO"], c["NCCL_PROTO"], c["NCCL_MAX_NCHANNELS"]) for c in configs} == \
        {("Ring", "LL", None), (None, None, None)}
    ring = next(c for c in configs if c["NCCL_ALGO"] == "Ring")
    cfg = space.trial_config(ring)
    assert cfg.env == {"NCCL_NVLS_ENABLE": "0", "NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}
    assert "nccl_candidate" not in cfg.server_args and "NCCL_MAX_NCHANNELS" in cfg.unset_env
    # A config given by its NCCL values alone (an export, --params) resolves to its candidate.
    bare = {k: v for k, v in ring.items() if k != "nccl_candidate"}
    assert space.trial_config(bare).params["nccl_candidate"] == "NCCL_ALGO=Ring,NCCL_PROTO=LL"
    assert "not among the kept candidates" in space.validate_config({**bare, "NCCL_ALGO": "Tree"})
    assert "must be" in space.validate_config({**ring, "NCCL_PROTO": "Simple"})
    # The baseline of a config keeps its NCCL candidate.
    assert space.validate_config(space.baseline_params(ring)) is None


class _Trial:
    """An Optuna-like trial that always takes the last choice."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        self.asked.append(name)
        return choices[-1]


def test_the_search_asks_for_one_candidate_not_each_nccl_variable(tmp_path: Path) -> None:
    space = load_space(_space(tmp_path, '{keep: 2, kept: [default, "NCCL_ALGO=Tree"]}'))
    trial = _Trial()
    params = space.suggest(trial)
    assert trial.asked == ["nccl_candidate"]
    assert params["nccl_candidate"] == "NCCL_ALGO=Tree" and params["NCCL_ALGO"] == "Tree"
    assert params["NCCL_PROTO"] is None


@pytest.mark.parametrize("prescreen, field, words", [
    ('{keep: 2, kept: ["NCCL_ALGO=Bogus"]}', "nccl_prescreen.kept[0]", "not a value of NCCL_ALGO"),
    ('{keep: 2, kept: ["NCCL_FOO=1"]}', "nccl_prescreen.kept[0]", "not an NCCL_* parameter"),
    ('{keep: 2, kept: ["NCCL_ALGO=Ring", "NCCL_ALGO=Ring"]}', "nccl_prescreen.kept[1]", "repeats"),
    ('{keep: 2, kept: ["Ring"]}', "nccl_prescreen.kept[0]", "NAME=value"),
    ("{keep: 0}", "nccl_prescreen.keep", ">= 1"),
    ("{keep: 2, backend: mpi}", "nccl_prescreen.backend", "allowed: auto, nccl, gloo, sim"),
    ("{keep: 2, tokens: [1, 0]}", "nccl_prescreen.tokens[1]", ">= 1"),
    ("{kept: [default]}", "nccl_prescreen.keep", "missing required key"),
])
def test_bad_prescreen_sections_say_where_and_what(tmp_path: Path, prescreen: str, field: str,
                                                   words: str) -> None:
    path = _space(tmp_path, prescreen)
    with pytest.raises(ConfigError) as info:
        load_space(path)
    assert info.value.field == field and info.value.file == str(path)
    assert info.value.line == 20
    assert words in str(info.value)


def test_prescreen_needs_unconditional_nccl_parameters_and_tp_above_one(tmp_path: Path) -> None:
    text = _space(tmp_path, "{keep: 2}").read_text()
    cases = [
        (text.replace("tp_size: 2", "tp_size: 1"), "tp_size >= 2"),
        (text.replace("choices: [null, 4]}", "choices: [null, 4], when: NCCL_ALGO == Ring}"),
         "when: condition"),
        ("\n".join(line for line in text.splitlines() if "NCCL_" not in line
                   or "NVLS" in line), "has none"),
    ]
    for content, words in cases:
        path = tmp_path / "case.yaml"
        path.write_text(content)
        with pytest.raises(ConfigError, match=words):
            load_space(path)


def test_narrowed_copy_loads_from_another_folder(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "profile.yaml").write_text(PROFILE.read_text())
    prompts = [json.dumps({"prompt": f"question number {i}"}) for i in range(4)]
    (src / "prompts.jsonl").write_text("\n".join(prompts) + "\n")
    text = _space(tmp_path, "{keep: 2}").read_text().replace(str(PROFILE), "profile.yaml")
    text = text.replace("{source: builtin,", "{source: jsonl, path: prompts.jsonl,")
    (src / "space.yaml").write_text(text)
    space = load_space(src / "space.yaml")
    kept = [c.name for c in candidates_from_space(space)][:3]
    elsewhere = tmp_path / "elsewhere" / NARROWED_NAME
    elsewhere.parent.mkdir()
    import yaml

    elsewhere.write_text(yaml.safe_dump(narrowed_data(space, kept)))
    narrowed = load_space(elsewhere)
    assert list(narrowed.nccl_bundle) == kept
    assert narrowed.profile == str(src / "profile.yaml")
    assert narrowed.workload["path"] == str(src / "prompts.jsonl")
    assert narrowed.name == space.name


# ---- real searches ------------------------------------------------------------------------------

def _parent(name: str, root: Path) -> tuple[Tracker, Any]:
    tracker = Tracker(name, root=str(root)).connect(create=False)
    parents = tracker.parent_runs()
    assert len(parents) == 1
    return tracker, parents[0]


@pytest.mark.slow  # a search on Ray
def test_search_probes_narrows_and_logs_to_the_parent_run(tmp_path: Path, sim_env: Path) -> None:
    path = _space(tmp_path, "{keep: 3}")
    out = io.StringIO()
    outcome = run_search(SearchOptions(space=str(path), root=str(tmp_path)), out=out)
    text = out.getvalue()
    assert "NCCL pre-screen: 18 candidate(s), keeping 3" in text

    narrowed = load_space(Path(outcome.experiment_path) / NARROWED_NAME)
    kept = list(narrowed.nccl_prescreen.kept)
    assert len(kept) == 3
    report = json.loads((Path(outcome.experiment_path) / "nccl-probe.json").read_text())
    assert report["host"]["backend"] == "sim" and report["spread"]["rounds"] == 1
    # One round says nothing about noise, so the plain default keeps the last place.
    top = report["ranking"][:3]
    assert kept == (top if "default" in top else top[:2] + ["default"])

    # The emulator's own verdict, end to end (tok/s of the whole config, not the NCCL term):
    # its best NCCL setting must be among the kept ones.
    full = load_space(path)
    evaluator = ModelEvaluator(full)
    by_tok_s = sorted(candidates_from_space(full), key=lambda c: -evaluator.expected(
        {k: _typed(full, k, v) for k, v in c.env.items()})["output_tok_s"])
    assert by_tok_s[0].name in kept
    assert by_tok_s[-1].name not in kept

    tracker, parent = _parent("nccl-prescreen-test", tmp_path)
    params, metrics = parent.data.params, parent.data.metrics
    assert json.loads(params["nccl_prescreen_kept"]) == kept
    assert params["nccl_prescreen_backend"] == "sim" and params["nccl_prescreen_candidates"] == "18"
    assert metrics["nccl_best_decode_us"] == pytest.approx(shown(report["spread"]["best_us"]))
    assert metrics["nccl_default_decode_us"] > metrics["nccl_best_decode_us"]
    assert parent.data.tags["autotune.nccl_prescreen"] == "ok"
    files = {a.path for a in tracker.client.list_artifacts(parent.info.run_id, "nccl_prescreen")}
    assert files == {"nccl_prescreen/nccl-probe.json", "nccl_prescreen/nccl-probe.txt",
                     f"nccl_prescreen/{NARROWED_NAME}"}

    trials = [r for r in tracker.trial_runs(parent.info.run_id) if r.kind == "trial"]
    assert len(trials) == 2
    for run in trials:
        p = tracker.client.get_run(run.run_id).data.params
        assert p["nccl_candidate"] in kept
        # The actual NCCL environment, not only the label.
        env = {k: p.get(k) for k in ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MAX_NCHANNELS")}
        from autotune.nccl.candidates import name_of

        assert name_of(env) == p["nccl_candidate"]


def _typed(space: SearchSpace, name: str, text: str | None) -> Any:
    if text is None:
        return None
    return next(c for c in space.parameters[name].choices if c is not None and str(c) == text)


@pytest.mark.slow  # a search on Ray
def test_a_failed_probe_stops_the_search_and_fails_the_parent_run(
        tmp_path: Path, sim_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Real gloo workers in a Ray task, each made to exit by the probe's test hook.
    monkeypatch.setenv("AUTOTUNE_NCCL_PROBE_FAULT", "exit")
    path = _space(tmp_path, "{keep: 2, backend: gloo, hidden: 16, iters: 2, warmup: 0}",
                  name="nccl-prescreen-fails")
    path.write_text(path.read_text().replace("choices: [null, LL, Simple]", "choices: [null]")
                    .replace("choices: [null, 4]", "choices: [null]")
                    .replace("choices: [null, Ring, Tree]", "choices: [null, Ring]"))
    with pytest.raises(PrescreenError, match="measured no candidate") as info:
        run_search(SearchOptions(space=str(path), root=str(tmp_path)), out=io.StringIO())
    assert "exited with code 3" in str(info.value)
    _, parent = _parent("nccl-prescreen-fails", tmp_path)
    assert parent.info.status == "FAILED"
    assert parent.data.tags["autotune.nccl_prescreen"] == "failed"
    assert "NCCL pre-screen" in parent.data.tags["autotune.reason"]


def test_choose_kept_keeps_the_default_when_the_rounds_cannot_tell_them_apart() -> None:
    from autotune.search.prescreen import choose_kept

    report = {"ranking": ["LL", "Ring", "default", "Tree"], "default": {"name": "default"},
              "spread": {"separated": False}}
    assert choose_kept(report, 2) == ["LL", "default"]
    assert choose_kept(report, 3) == ["LL", "Ring", "default"]
    report["spread"]["separated"] = True
    assert choose_kept(report, 2) == ["LL", "Ring"]
    report["spread"]["separated"] = None  # one round: nothing known about noise, keep the default
    assert choose_kept(report, 2) == ["LL", "default"]
    report["spread"].pop("separated")
    assert choose_kept(report, 2) == ["LL", "default"]
