"""How many trials each search strategy needs to get within 2% of the best config.

``python -m benchmarks.search --space S [--profile P] --seeds 20 --budget B [--noise CV]
[--finalists N|space] [--json]`` runs, on the model-only evaluator (:mod:`autotune.simtools.evaluate`) with
measurement noise
(by default the CV measured from the recorded real landscapes' repeats, :mod:`benchmarks.search.noise`;
``--print-noise`` prints it),
and ``python -m benchmarks.search --landscape FILE [--space S] ...`` on a recorded landscape
(:mod:`benchmarks.search.landscape`: real measurements of every config, replayed, the noise drawn from each
config's recorded repeats), these strategies (``python -m autotune.bench_search`` is the same command, in a checkout):

- ``grid``: every config in the order of SGLang's ``bench_speculative.py``;
- ``random``: Optuna's random sampler;
- ``tpe``: Optuna's TPE with its defaults (10 random start-up trials);
- ``auto-tier1``, ``auto-tier2``: SGLang ``auto_benchmark``'s tier 1 and tier 2 searches
  (:mod:`benchmarks.search.peers`), then random;
- ``phase-model``: :class:`autotune.search.samplers.PhaseModelSampler`.

The report ends with the phase model's median against the best median of the peers (random, TPE
and the auto_benchmark tiers), and for the tiers how many runs reached the target inside the
tier's own plan rather than in the random tail after it.

Each strategy runs through a real Optuna study and the space's own define-by-run
(``SearchSpace.suggest``), one trial at a time. A trial gets back what a real trial reports: the
noisy measured tok/s as the objective, the constraints (``failed``, ``break_even``) through
``trial.set_constraint``, and the user attrs of ``docs/samplers.md`` (phase profile, accept length,
accepted-drafts histogram, the group's baseline).

How trials are counted: as autotune's trainable does, the first trial of a new non-speculative
group measures that group's baseline first. That baseline run counts as one trial, for every
strategy alike, and is a candidate winner (when no speculative config beats the baseline, the
baseline is the answer). Failed and infeasible configs count as trials and are never picked. A
re-proposed config is measured (and counted) again.

After every trial the strategy's pick is its best measured feasible config (mean of its
measurements); the run succeeds at the first trial where the pick's true tok/s (noise-free, or
the recorded median) is at least ``--threshold`` (0.98) of the true optimum: the best feasible
config of the space, baselines included. This is issue 15's count, the default.

``--finalists N`` (N >= 1) counts the search's conclusion as well: after every trial the pick is
what the search, stopped there, would name after re-measuring its N best feasible speculative
trials beside fresh baselines, from the same noise, with the winner policy
(:mod:`benchmarks.search.conclusion`); the count is that trial plus the conclusion's runs
(two a finalist), within the budget. ``--finalists space`` takes N from the space, as the search
does (``max(1, search.finalists)``). The conclusion costs every strategy the same runs.

``--stop-rule`` replays the search's stop rule instead (:mod:`benchmarks.search.stop_replay`):
the phase model run with the rule asked before every trial, against the same runs to the full
``--budget``; it prints the success rate and the trials used (median, p10-p90, min-max) of both
rows. With ``--finalists`` both rows end with the search's conclusion, its runs counted.

Noise is common across strategies: the n-th measurement of a config in seed s gets the same noise
whichever strategy asks for it. The truth, the noise and the oracle live in
:mod:`benchmarks.search.problem`.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Mapping
from typing import Any

from autotune import cli
from autotune.errors import AutotuneError
from benchmarks.search.cost_replay import cost_benchmark, render_cost
from benchmarks.search.noise import measured_noise
from benchmarks.search.stop_replay import render_stop_rule, stop_rule_benchmark
from benchmarks.search.strategies import AUTO_TIERS, FINALISTS_OF_SPACE, OURS, STRATEGIES, benchmark


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _warm_line(warm: Mapping[str, Any] | None) -> str:
    if warm is None:
        return "warm start: off (--no-warm-start)"
    if warm.get("params") is None:
        return f"warm start: {warm['describe']}"
    if warm.get("tok_s") is None:
        return (f"warm start (every strategy's first trial): {warm['describe'].replace(', measured first', '')}: "
                "it fails here")
    verdict = "reaches the target" if warm["reaches_target"] else (
        "below the target" if warm["feasible"] else "infeasible (does not beat its baseline)")
    return (f"warm start (every strategy's first trial): {warm['describe'].replace(', measured first', '')}: "
            f"{warm['tok_s']:.2f} tok/s, {warm['of_optimum']:.1%} of the optimum, {verdict}")


def _finalists(value: str) -> int | str:
    """``--finalists``: a whole number >= 1, or ``space``."""
    if value.strip().lower() == FINALISTS_OF_SPACE:
        return FINALISTS_OF_SPACE
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(
            f"expected a whole number >= 1 or '{FINALISTS_OF_SPACE}' (the space's "
            f"max(1, search.finalists)), got {value!r}")
    return n


def _conclusion_line(finalists: int | None) -> str:
    if finalists is None:
        return ("pick: the best measured feasible config after each trial, no finalists counted "
                "(--finalists N or --finalists space adds the search's conclusion)")
    return (f"pick: what the search, stopped after the trial, names after re-measuring its "
            f"{finalists} best feasible speculative trial(s) beside fresh baselines; each finalist "
            f"costs 2 runs, counted (fin.runs: their mean in the runs that reached the target)")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _gpu_line(a: Mapping[str, Any]) -> str:
    what = "a confirmed winner (finalists counted)" if a.get("finalists") is not None else (
        "the target (no finalists: --finalists N counts a confirmed winner)")
    return (f"GPU-s: GPU-seconds of every server started until {what}, median and p10-p90 over "
            "seeds (a run that never reaches it counts as infinite); the sweep measures every config "
            "and each group's baseline once (its median column: the servers). Times: "
            "benchmarks/search/gpu_model.py (recorded where the landscape has them, else its model); "
            "tuner overhead and teardown are not counted.")


def render(result: Mapping[str, Any]) -> str:
    """Plain-text table of a :func:`~benchmarks.search.strategies.benchmark` result."""
    any_summary = next(iter(result.values()))
    a = any_summary
    concluded = a.get("finalists") is not None
    if a.get("oracle") == "landscape":
        lines = [(f"oracle: recorded landscape {a['landscape']} ({a['records']} records"
                  + (f"; acceptance {a['acceptance']}" if a.get("acceptance") else "") + ")"
                  + (f": {a['description']}" if a.get("description") else "")),
                 ("noise: each measurement is one of the config's recorded repeats; the "
                  "phase-model sampler's fitted model is not the oracle here"),
                 (f"space {a['space']}  {a['configs']} configs in {a['groups']} groups  "
                  f"seeds {a['seeds']}")]
    else:
        source = a.get("noise_source") or {}
        lines = [(f"space {a['space']}  profile {a['profile']}  {a['configs']} configs in "
                  f"{a['groups']} groups  seeds {a['seeds']}"),
                 source.get("describe") or f"noise cv {a['noise_cv']}"]
    lines += [(f"optimum {a['optimum_tok_s']:.2f} tok/s  target (>= "
               f"{a['target_tok_s'] / a['optimum_tok_s']:.0%}) {a['target_tok_s']:.2f}  at "
               f"{a['optimum_params']}"),
              _warm_line(a.get("warm_start")),
              _conclusion_line(a.get("finalists")),
              "",
              (f"{'strategy':<12} {'median':>7} {'p90':>7} {'success':>8} {'ours/this':>10} "
               f"{'x fewer':>8} {'baselines':>9} {'failed':>7} {'dups':>5} "
               + (f"{'fin.runs':>8} " if concluded else "") + f"{'secs':>6} "
               f"{'GPU-s':>8} {'GPU-s p10-p90':>15} {'of sweep':>8}")]
    for name, s in result.items():
        lines.append(f"{name:<12} {_fmt(s['median']):>7} {_fmt(s['p90']):>7} "
                     f"{s['success_rate']:>8.0%} {_fmt(s['ratio_ours_to_this'], 2):>10} "
                     f"{_fmt(s['times_fewer_with_ours'], 1):>8} {s['mean_baselines']:>9.1f} "
                     f"{s['mean_failed']:>7.1f} {s['mean_duplicates']:>5.1f} "
                     + (f"{_fmt(s.get('mean_conclusion_runs')):>8} " if concluded else "")
                     + f"{s['seconds']:>6.1f} {_fmt(s.get('gpu_s_median'), 0):>8} "
                     f"{_fmt(s.get('gpu_s_p10'), 0) + '-' + _fmt(s.get('gpu_s_p90'), 0):>15} "
                     f"{_pct(s.get('gpu_s_median_of_sweep')):>8}")
    tail = len(f" {'':>8} {'':>15} {'':>8}")  # the GPU columns, which the sweep fills
    lines.append(f"{'sweep':<12} {a['sweep_servers']:>7}".ljust(len(lines[-len(result) - 1]) - tail)
                 + f" {a['sweep_gpu_s']:>8.0f} {'':>15} {'100%':>8}")
    lines.append(_gpu_line(a))
    grid = result.get("grid")
    if grid:
        lines.append("")
        lines.append(f"grid size {grid['grid_size']}; without a budget the grid reaches the target "
                     f"after a median of {_fmt(grid['unbudgeted_median'])} trials"
                     + (f"; grid size / our median = {grid['grid_size_over_ours']:.1f}x"
                        if grid.get("grid_size_over_ours") else ""))
    if not grid and (any(n in result for n in AUTO_TIERS) or OURS in result):
        lines.append("")
    for name in AUTO_TIERS:
        s = result.get(name)
        if s:
            by = s.get("reached_by") or {}
            inside = by.get("base", 0) + by.get("speculative", 0)
            lines.append(f"{name}: reached the target inside its own plan in {inside} of "
                         f"{len(s['trials_to_target'])} runs (base stage {by.get('base', 0)}, "
                         f"speculative stage {by.get('speculative', 0)}), in the random tail "
                         f"after it in {by.get('random', 0)}")
    ours = result.get(OURS)
    if ours and ours.get("peers"):
        peers = ", ".join(ours["peers"])
        if ours.get("best_peer"):
            ratio = ours["times_fewer_than_best_peer"]
            lines.append(f"{OURS} against the best of {peers}: {ours['best_peer']} (median "
                         f"{_fmt(ours['best_peer_median'])}) / ours ({_fmt(ours['median'])}) = "
                         + ("-" if not ratio else f"{ratio:.2f}x fewer trials" if ratio >= 1
                            else f"{1 / ratio:.2f}x more trials (ours is behind)"))
        else:
            above = ours.get("times_fewer_than_best_peer_above")
            lines.append(f"{OURS} against the best of {peers}: none has a median within the "
                         f"budget of {ours['budget']}"
                         + (f", so > {above:.2f}x fewer trials" if above else ""))
    lines.append("Trials count every run: a new group's baseline (measured first) is one trial"
                 + ("." if not concluded
                    else ", a finalist two (its fresh baseline, then itself)."))
    return "\n".join(lines)


def print_noise() -> int:
    """``--print-noise``: the measured default noise, per file, and what was left out."""
    try:
        m = measured_noise()
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return cli.BAD_INPUT
    print(m.describe())
    print(f"estimator: {m.source()['estimator']} (each config's mean taken out, n - 1 degrees "
          "of freedom a config)")
    for path, configs, repeats, cv in m.per_file:
        print(f"  {os.path.relpath(path)}: {configs} configs, {repeats} repeats, cv {cv:.5f} alone")
    for why in m.skipped:
        print(f"  skipped: {why}")
    return 0


def build_parser(prog: str = "python -m benchmarks.search") -> cli.CommandParser:
    """The sampler benchmark's command line, named ``prog`` in its usage lines."""
    parser = cli.command_parser(prog, __doc__ or "", examples=[
        "{prog} --space kimi-k2.5-eagle3-tp8-sim --seeds 20 --budget 60",
        "{prog} --landscape LANDSCAPE.json --json -o figures.json"])
    parser.add_argument("--space",
                        help="search space YAML or packaged name (backend sim, or give --profile); with "
                             "--landscape, overrides the landscape's own space")
    parser.add_argument("--landscape", metavar="FILE",
                        help="replay a recorded landscape (real measurements of every config, "
                             "scripts/gpu/landscape.py) instead of the emulator")
    parser.add_argument("--profile", help="sim profile name or YAML path (default: the space's); "
                                          "not with --landscape")
    parser.add_argument("--seeds", type=cli.positive_int, default=20, help="runs per strategy (default 20)")
    parser.add_argument("--first-seed", type=cli.seed, default=0)
    parser.add_argument("--budget", type=cli.positive_int, default=60, help="trials per run (default 60)")
    parser.add_argument("--noise", type=cli.float_in(0.0), default=None,
                        help="tok/s noise CV on the emulator (default: measured from the "
                             "recorded real landscapes, see --print-noise; 0.02 is the stress "
                             "check); does not apply to --landscape, whose noise is drawn from "
                             "the recorded repeats (giving both is an error)")
    parser.add_argument("--print-noise", action="store_true",
                        help="print the default noise CV, measured from "
                             "benchmarks/landscapes/recorded-h200-*.json, and exit")
    parser.add_argument("--threshold", type=cli.float_in(0.0, 1.0, low_included=False), default=0.98,
                        help="fraction of the optimum that counts as reached (default 0.98)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES),
                        help=f"comma-separated subset of {','.join(STRATEGIES)}")
    parser.add_argument("--no-phase-data", action="store_true",
                        help="trials report no phases or accept data (the sampler's fallback)")
    parser.add_argument("--no-warm-start", action="store_true",
                        help="do not run SGLang's default speculative config first (every search does)")
    parser.add_argument("--finalists", type=_finalists, default=None, metavar="N|space",
                        help="also count the search's conclusion: after each trial, the N best "
                             "feasible speculative trials are re-measured beside fresh baselines "
                             "(two runs each, added to the count) and the winner policy names the "
                             "pick; 'space' takes N from the space, max(1, search.finalists), as "
                             "the search does. Default: off, issue 15's count (the pick is the best "
                             "measured feasible config, nothing added)")
    parser.add_argument("--stop-rule", action="store_true",
                        help="replay the search's stop rule for the phase model: success rate and "
                             "trials used with the rule against the full --budget, same runs")
    parser.add_argument("--cost-per-answer", action="store_true",
                        help="GPU-seconds to a confirmed winner along the search's whole path: the "
                             "phase model with the stop rule and sequential measurement (the product "
                             "default) against the full budget with fixed repeats (today), the best "
                             "peer among --strategies and the sweep; --budget is then Optuna "
                             "trials (default: the space's budget.trials)")
    cli.add_output(parser, record="the figures, keyed by strategy")
    return parser


def budget_given(argv: list[str] | None) -> bool:
    """Whether ``--budget`` was written (``--cost-per-answer`` otherwise takes the space's)."""
    words = sys.argv[1:] if argv is None else argv
    return any(w == "--budget" or w.startswith("--budget=") for w in words)


def main(argv: list[str] | None = None, *, prog: str = "python -m benchmarks.search") -> int:
    """The sampler benchmark's command; ``prog`` names it in usage lines (``autotune bench-search``
    passes its own)."""
    parser = build_parser(prog)
    args = parser.parse_command(argv)
    if args.print_noise:
        return print_noise()
    if args.space is None and args.landscape is None:
        parser.error("give --space or --landscape")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", module="optuna")
    if args.cost_per_answer:
        try:
            cost = cost_benchmark(args.space, landscape=args.landscape, profile=args.profile,
                                  seeds=args.seeds, first_seed=args.first_seed,
                                  budget=args.budget if budget_given(argv) else None,
                                  noise_cv=args.noise, threshold=args.threshold,
                                  peers=[s.strip() for s in args.strategies.split(",") if s.strip()])
        except (AutotuneError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return cli.BAD_INPUT
        return cli.emit(args, text=render_cost(cost), record=cost)
    if args.stop_rule:
        try:
            replay = stop_rule_benchmark(args.space, landscape=args.landscape, profile=args.profile,
                                         seeds=args.seeds, first_seed=args.first_seed,
                                         budget=args.budget, noise_cv=args.noise,
                                         threshold=args.threshold, finalists=args.finalists)
        except (AutotuneError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return cli.BAD_INPUT
        return cli.emit(args, text=render_stop_rule(replay), record=replay)
    try:
        result = benchmark(args.space, profile=args.profile, seeds=args.seeds, budget=args.budget,
                           noise_cv=args.noise, threshold=args.threshold,
                           strategies=[s.strip() for s in args.strategies.split(",") if s.strip()],
                           phase_data=not args.no_phase_data, first_seed=args.first_seed,
                           landscape=args.landscape, warm_start=not args.no_warm_start,
                           finalists=args.finalists)
    except (AutotuneError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return cli.BAD_INPUT
    return cli.emit(args, text=render(result), record=result)


if __name__ == "__main__":
    sys.exit(main())
