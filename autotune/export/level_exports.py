"""The per-level exports of a search measured at several levels (``concurrency: [1, 8, 64]`` or
``request_rate: [2, 8]``).

:func:`per_level_json` is the table: for each level, the config that wins there (the one winner
policy applied per level, :func:`autotune.tracking.runs.select_level_winners`), its figures at that
level and its real-SGLang launch, each checked by SGLang's parser as the single export is.
:func:`adaptive_export` is the same answer as one server: SGLang's per-batch-size adaptive
speculation table (:mod:`autotune.sglang.adaptive`), read back by SGLang's own loader, and the launch
command that uses it, checked by SGLang's parser. That form exists only when every level's winner
can share one server: the same non-speculative settings, EAGLE/EAGLE3 chains (topk 1) or no
speculation; otherwise the error says which level stands in the way. It also needs concurrency
levels: SGLang keys the table by batch size, and a request rate sets no batch size (the batch an
open-loop rate builds depends on the server's speed), so rate levels export the table only.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import ConfigError, LaunchArgsError
from autotune.export.launch_command import NothingToExport, render, winner_spec, without_speculation
from autotune.launch.spec import LaunchSpec
from autotune.sglang import adaptive
from autotune.tracking.runs import KIND_SEARCH, TAG_KIND, Winner, objective_of, search_levels, select_level_winners
from autotune.trial.level_results import CONCURRENCY, LoadLevel, metric_suffix

if TYPE_CHECKING:
    from autotune.tracking.search_reader import SearchReader

__all__ = ["adaptive_export", "level_winners", "per_level_json"]

_FIGURES = ("output_tok_s", "baseline_tok_s", "speedup", "accept_length", "break_even_accept_length")


def level_winners(reader: SearchReader, *, run_id: str | None = None
                  ) -> tuple[str, list[LoadLevel], dict[LoadLevel, Winner | None]]:
    """``(search run id, levels, winner per level)`` of the newest search run, or of ``run_id``.

    Raises:
        ConfigError: ``run_id`` is not a search run of this experiment.
        NothingToExport: No search run, or its trials were measured at one level only.
    """
    parent = run_id or reader.latest_search_run_id()
    if parent is None:
        raise NothingToExport(f"search {reader.name!r} has no search run in {reader.tracking_uri}")
    run = reader.get_run(parent)
    if run.info.experiment_id != reader.experiment_id or run.data.tags.get(TAG_KIND) != KIND_SEARCH:
        raise ConfigError(f"run {parent} is not a search run of {reader.name!r}; the per-level "
                          "exports choose within a search", field="run_id")
    runs = reader.trial_runs(parent)
    levels = search_levels(runs)
    if not levels:
        raise NothingToExport(f"search run {parent} measured one load level only; per-level "
                              "exports need workload.concurrency: [..] or request_rate: [..] "
                              "(use the plain export)")
    metric, maximize = objective_of(run.data.tags)
    return parent, levels, select_level_winners(runs, levels, objective=metric, maximize=maximize)


def per_level_json(reader: SearchReader, *, run_id: str | None = None, **spec_kw: Any) -> str:
    """The per-level table as JSON: each level's winner, its figures there and its launch.

    ``spec_kw`` are :func:`autotune.export.launch_command.winner_spec`'s (``strip_metrics``, ``host``,
    ``port``). A level where nothing was feasible has ``"winner": null``: nothing to serve there.
    """
    parent, levels, winners = level_winners(reader, run_id=run_id)
    rows = []
    for level in levels:
        w = winners[level]
        row: dict[str, Any] = {**level.field(), "level": level.label, "winner": None}
        if w is not None:
            launch = json.loads(render(winner_spec(reader, w, **spec_kw), "json"))
            row["winner"] = {
                "run_id": w.run.run_id, "trial_id": w.run.trial_id, "kind": w.run.kind,
                "confirmed": w.run.confirmed, "is_baseline": w.is_baseline, "note": w.note,
                "params": {k: w.run.params.get(k) for k in w.run.searched},
                **{f: w.run.metric(f + metric_suffix(level)) for f in _FIGURES},
                "argv": launch["argv"], "env": launch["env"]}
            if w.is_baseline:
                row["winner"]["accept_length"] = row["winner"]["break_even_accept_length"] = None
        rows.append(row)
    data = {"search": reader.name, "search_run_id": parent, "levels": rows,
            "note": "each level's best config by the search's winner policy, judged against its "
                    f"baseline measured at the same {levels[0].title}"}
    return json.dumps(data, indent=2) + "\n"


def adaptive_export(reader: SearchReader, config_path: str | Path, *, run_id: str | None = None,
                    **spec_kw: Any) -> str:
    """Write SGLang's adaptive table to ``config_path`` and return the launch script that uses it.

    Raises:
        NothingToExport: A level has no feasible config, or no level speculates.
        LaunchArgsError: The winners cannot share one adaptive server (why), or SGLang's loader
            or parser rejects the result.
    """
    parent, levels, winners = level_winners(reader, run_id=run_id)
    if any(lv.axis != CONCURRENCY for lv in levels):
        raise ConfigError(f"search run {parent} measured request-rate levels "
                          f"({', '.join(lv.label for lv in levels)}); SGLang's adaptive speculation "
                          "table is keyed by batch size, and a request rate fixes no batch size (it "
                          "depends on how fast the server drains the queue), so there is no table to "
                          "write; use --per-level for each rate's best config, or search "
                          "workload.concurrency: [..] for the adaptive form", field="adaptive_config")
    # Concurrency levels from here on: the table's batch sizes.
    batch = {int(lv.value): w for lv, w in winners.items()}
    levels_b = [int(lv.value) for lv in levels]
    missing = [lv for lv in levels_b if batch[lv] is None]
    if missing:
        raise NothingToExport(f"no feasible config at concurrency {missing}: the table would "
                              "have nothing to serve there")
    specs = {lv: winner_spec(reader, batch[lv], **spec_kw) for lv in levels_b}  # type: ignore[arg-type]
    steps: dict[int, int] = {}  # batch size -> the winner's step count there
    for lv in levels_b:
        if batch[lv].is_baseline:  # type: ignore[union-attr]
            steps[lv] = 0
            continue
        why = adaptive.unsupported(specs[lv].server_args)
        if why is not None:
            raise LaunchArgsError(f"concurrency {lv}'s winner cannot run adaptive speculation: {why}")
        steps[lv] = int(specs[lv].server_args["speculative_num_steps"])
    if not any(steps.values()):
        raise NothingToExport("every level's best is the no-speculation baseline: serve without "
                              "speculation (python -m autotune.export)")
    base = next(specs[lv] for lv in levels_b if steps[lv])
    _same_server(base, specs, levels_b)
    path = Path(config_path).resolve()  # the launch names it; a relative path moves with the shell
    path.write_text(json.dumps(adaptive.adaptive_table(steps), indent=2) + "\n")
    union, checker = adaptive.check_table(path)
    args = {**base.server_args, adaptive.SWITCH_ARG: True, adaptive.CONFIG_ARG: str(path)}
    if int(args["speculative_num_steps"]) not in union:
        raise LaunchArgsError(f"speculative_num_steps {args['speculative_num_steps']} is not among "
                              f"the table's candidate steps {union}")
    script = render(replace(base, server_args=args), "sh")
    table = ", ".join(f"{lv}: {'no speculation' if not s else f'{s} steps'}" for lv, s in steps.items())
    notes = [f"autotune export of search {reader.name!r} (run {parent}): SGLang adaptive speculation",
             f"per batch size (the largest level not above it): {table}",
             f"table {path} read back by {checker}; each level pinned to its measured step count",
             "each level was measured as a fixed launch; the adaptive server switching between them "
             "was not measured"]
    head = "#!/usr/bin/env bash\n"
    return head + "".join(f"# {line}\n" for line in notes) + script[len(head):]


def _same_server(base: LaunchSpec, specs: dict[int, LaunchSpec], levels: list[int]) -> None:
    """Every level's winner must be the same server apart from its speculative settings."""
    plain = without_speculation(base)
    for lv in levels:
        other = without_speculation(specs[lv])
        diff = sorted(k for k in set(plain.server_args) | set(other.server_args)
                      if plain.server_args.get(k) != other.server_args.get(k))
        diff += sorted(k for k in set(plain.env) | set(other.env) if plain.env.get(k) != other.env.get(k))
        if diff or other.model_path != plain.model_path:
            raise LaunchArgsError(f"concurrency {lv}'s winner differs from the others in more than "
                                  f"speculation ({', '.join(diff) or 'model_path'}): one adaptive "
                                  "server cannot serve every level; use the per-level table (--per-level)")
        if specs[lv].server_args.get("speculative_algorithm") not in (
                None, base.server_args.get("speculative_algorithm")) or (
                specs[lv].draft_model_path not in (None, base.draft_model_path)):
            raise LaunchArgsError(f"concurrency {lv}'s winner uses another algorithm or draft "
                                  "model: one adaptive server runs one draft")
