"""Figures for MLflow: one trial's phase breakdown, and the search-level views.

Figures are built on :class:`matplotlib.figure.Figure` directly (Agg canvas), not through pyplot,
so they need no display, keep no global state, and are safe in Ray workers. Only Optuna's own
plots go through pyplot; :func:`optuna_figures` switches to Agg first when pyplot is not loaded yet.
Every plotting function leaves out what is unknown rather than drawing it as zero.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from matplotlib.figure import Figure

from autotune.figures import finite
from autotune.trial.outcome import Status

if TYPE_CHECKING:
    from optuna import Study

# Phase keys of PhaseProfile.to_dict, in drawing order; decode replaces draft/verify/extend
# without speculation. Together they make up cycle_ms.
PHASES = ("draft", "verify", "extend", "decode", "prefill", "gpu_other", "other")
_COLOURS = {"draft": "#4C72B0", "verify": "#DD8452", "extend": "#55A868", "decode": "#8172B3",
            "prefill": "#DA8BC3", "gpu_other": "#8C8C8C", "other": "#937860"}


def _known(value: Any) -> TypeGuard[float]:
    return finite(value) is not None


def _xs(values: Iterable[float | None]) -> list[float]:
    """The values of points already filtered to known ones (drops None for the type checker)."""
    return [v for v in values if v is not None]


def phase_figure(phases: Mapping[str, Any], *, title: str = "") -> Figure | None:
    """A horizontal bar per phase that took time: ms per cycle, labelled with its share.

    Args:
        phases: ``PhaseProfile.to_dict()`` output (``draft_ms``, ``draft_pct``, ..., ``cycle_ms``).
        title: Figure title (the trial id, say).

    Returns:
        The figure, or None when no phase time is known.
    """
    given = [(name, phases.get(f"{name}_ms"), phases.get(f"{name}_pct")) for name in PHASES]
    # A phase that took no time at all (decode in a speculative run) is left out of the picture;
    # phases.json still has it.
    rows = [(n, float(ms), pct) for n, ms, pct in given if _known(ms) and ms > 0]
    if not rows:
        return None
    fig = Figure(figsize=(7, 0.6 * len(rows) + 1.6))
    ax = fig.add_subplot()
    names = [n for n, _, _ in rows]
    values = [ms for _, ms, _ in rows]
    bars = ax.barh(names, values, color=[_COLOURS[n] for n in names])
    for bar, (_, ms, pct) in zip(bars, rows, strict=True):
        label = f"{ms:.2f} ms" + (f" ({pct:.1f}%)" if _known(pct) else "")
        ax.annotate(label, (bar.get_width(), bar.get_y() + bar.get_height() / 2),
                    xytext=(4, 0), textcoords="offset points", va="center", fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, max(values) * 1.35)
    ax.set_xlabel("ms per cycle")
    cycle = phases.get("cycle_ms")
    sub = f"cycle {cycle:.2f} ms" if _known(cycle) else "cycle unknown"
    ax.set_title(f"{title}  ({sub})" if title else sub, fontsize=10)
    fig.tight_layout()
    return fig


@dataclass(frozen=True)
class TrialPoint:
    """What the search-level plots need from one trial run. Unknowns are None."""

    trial_id: str
    kind: str
    status: str | None
    steps: int | None
    topk: int | None
    output_tok_s: float | None
    accept_length: float | None
    break_even_accept_length: float | None


def tok_s_by_steps_figure(points: Sequence[TrialPoint], *,
                          baseline_tok_s: float | None = None) -> Figure | None:
    """Output tok/s against speculative steps, one series per topk; feasible filled, others hollow.

    Returns:
        The figure, or None when no speculative trial has both steps and tok/s.
    """
    usable = [p for p in points if p.steps is not None and _known(p.output_tok_s)]
    if not usable:
        return None
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    topks = sorted({p.topk for p in usable}, key=lambda t: (t is None, t))
    palette = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3",
               "#8C8C8C"]
    for i, topk in enumerate(topks):
        group = [p for p in usable if p.topk == topk]
        colour = palette[i % len(palette)]
        label = f"topk={topk}" if topk is not None else "topk unknown"
        feasible = [p for p in group if p.status == Status.FEASIBLE]
        other = [p for p in group if p.status != Status.FEASIBLE]
        if feasible:
            ax.scatter(_xs(p.steps for p in feasible), _xs(p.output_tok_s for p in feasible),
                       color=colour, label=f"{label} (feasible)", zorder=3)
        if other:
            ax.scatter(_xs(p.steps for p in other), _xs(p.output_tok_s for p in other),
                       facecolors="none", edgecolors=colour, label=f"{label} (infeasible)",
                       zorder=3)
    if _known(baseline_tok_s):
        ax.axhline(baseline_tok_s, color="black", linestyle="--", linewidth=1,
                   label=f"baseline {baseline_tok_s:.0f} tok/s")
    ax.set_xlabel("speculative_num_steps")
    ax.set_ylabel("output tok/s (median)")
    ax.set_title("Throughput against draft steps, by topk", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def accept_vs_break_even_figure(points: Sequence[TrialPoint]) -> Figure | None:
    """Measured accept length against break-even accept length, with the y = x line.

    A trial above the line accepts more than it needs to pay for its cycle.

    Returns:
        The figure, or None when no trial has both figures.
    """
    usable = [p for p in points if _known(p.accept_length) and _known(p.break_even_accept_length)]
    if not usable:
        return None
    fig = Figure(figsize=(6, 5))
    ax = fig.add_subplot()
    styles: tuple[tuple[Status | None, dict[str, Any]], ...] = (
        (Status.FEASIBLE, {"color": "#55A868"}), (None, {"facecolors": "none", "edgecolors": "#C44E52"}))
    for status, style in styles:
        group = [p for p in usable if (p.status == Status.FEASIBLE) == (status == Status.FEASIBLE)]
        if group:
            ax.scatter(_xs(p.break_even_accept_length for p in group),
                       _xs(p.accept_length for p in group), zorder=3,
                       label="feasible" if status else "not feasible", **style)
    values = _xs(p.accept_length for p in usable) + _xs(p.break_even_accept_length for p in usable)
    lo, hi = min(values), max(values)
    pad = max((hi - lo) * 0.1, 0.1)
    ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="black", linestyle="--",
            linewidth=1, label="y = x (break-even)")
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_ylim(lo - pad, hi + pad)
    ax.set_xlabel("break-even accept length")
    ax.set_ylabel("measured accept length")
    ax.set_title("Accept length against break-even", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def optuna_figures(study: Study) -> tuple[dict[str, Figure], dict[str, str]]:
    """Optuna's parameter-importance, parallel-coordinate and slice plots of a study.

    Tiny or degenerate studies (one trial, one parameter, no variance) make Optuna raise or
    warn; each plot that cannot be drawn is reported with its reason instead.

    Args:
        study: An ``optuna.Study`` (single objective).

    Returns:
        ``(figures, skipped)``: file stem -> figure, and file stem -> why it was left out.
    """
    import sys
    import warnings

    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna
    from optuna.visualization import matplotlib as ovm

    figures: dict[str, Figure] = {}
    skipped: dict[str, str] = {}
    complete = [t for t in study.get_trials(deepcopy=False)
                if t.state == optuna.trial.TrialState.COMPLETE]
    if len(complete) < 2:
        reason = f"needs at least 2 completed trials, the study has {len(complete)}"
        return {}, {k: reason for k in ("param_importances", "parallel_coordinate", "slice")}
    plots: dict[str, Callable[..., Any]] = {"param_importances": ovm.plot_param_importances,
             "parallel_coordinate": ovm.plot_parallel_coordinate, "slice": ovm.plot_slice}
    for stem, plot in plots.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = plot(study)
        except Exception as exc:  # noqa: BLE001 - Optuna raises many types for degenerate studies
            skipped[stem] = f"{type(exc).__name__}: {exc}"
            continue
        axes = result if not hasattr(result, "ravel") else result.ravel()[0]
        fig = axes.figure if hasattr(axes, "figure") else None
        if fig is None:
            skipped[stem] = "Optuna returned no figure"
            continue
        fig.set_size_inches(max(fig.get_size_inches()[0], 8), max(fig.get_size_inches()[1], 5))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna's colour-bar axes upset tight_layout
            fig.tight_layout()
        figures[stem] = fig
        plt.close(fig)  # detach from pyplot's registry; the Figure object stays usable
    return figures, skipped


__all__ = ["PHASES", "TrialPoint", "accept_vs_break_even_figure", "optuna_figures",
           "phase_figure", "tok_s_by_steps_figure"]
