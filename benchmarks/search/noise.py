"""bench_search's default emulator noise, measured from the recorded real-GPU landscapes.

``python -m benchmarks.search --space S`` draws each emulated measurement as
``tok/s * exp(N(0, cv) - cv**2 / 2)`` (:mod:`benchmarks.search.problem`). Its default ``cv``
is not chosen by hand: :func:`measured_noise` estimates it from the committed real landscapes,
``benchmarks/landscapes/recorded-h200-*.json``, where every config holds the tok/s of its repeats
(``output_tok_s_repeats``, the runs of the workload one trial measured on one server).

The estimator (:func:`autotune.figures.pooled_log_sd`, shared with the search's stop rule) is the
pooled within-config standard deviation of ln tok/s::

    cv = sqrt( sum_i sum_j (ln x_ij - mean_j ln x_ij)**2 / sum_i (n_i - 1) )

over configs i with n_i >= 2 repeats x_ij: each config's own mean is taken out (configs differ by
2x in tok/s, so only the spread around each config's mean is noise), the squared deviations are
pooled with n_i - 1 degrees of freedom a config (the unbiased pooled variance), and the log makes
the noise relative, as the emulator draws it. It is the sigma of the emulator's log-normal draw;
its CV, ``sqrt(exp(sigma**2) - 1)``, differs from it by under 0.01% of itself at these sizes.

What it measures: the spread of single repeats back to back on one server, which is what a
landscape replay draws for one measurement (one recorded repeat) and what the emulator then draws
too. It leaves out what the repeats do not see: a server relaunched, another machine, another
day. A trial reports the median of its repeats, whose spread is smaller than one repeat's.

``python -m benchmarks.search --print-noise`` prints it, with the files it came from.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.figures import pooled_log_sd

#: The committed recorded landscapes (the checkout's benchmarks/landscapes/).
LANDSCAPES = Path(__file__).resolve().parents[1] / "landscapes"
RECORDED_GLOB = "recorded-h200-*.json"
ESTIMATOR = "pooled within-config standard deviation of ln tok/s over the recorded repeats"


@dataclass(frozen=True)
class MeasuredNoise:
    """The noise CV measured from recorded repeats, and what it rests on.

    Attributes:
        cv: The pooled within-config standard deviation of ln tok/s (:func:`pooled_log_sd`).
        configs: Configs that contributed (two repeats or more).
        repeats: Their repeats, all together.
        files: The files that contributed, as given.
        per_file: ``(file, configs, repeats, cv of that file alone)`` for each contributing file.
        skipped: ``"FILE: why"`` for each file, or records of a file, left out.
    """

    cv: float
    configs: int
    repeats: int
    files: tuple[str, ...]
    per_file: tuple[tuple[str, int, int, float], ...]
    skipped: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line: ``noise cv 0.00913 (measured: 40 configs, 120 repeats from A.json, B.json)``."""
        names = ", ".join(os.path.basename(f) for f in self.files)
        return (f"noise cv {self.cv:.5f} (measured: {self.configs} configs, {self.repeats} "
                f"repeats from {names})")

    def source(self) -> dict[str, Any]:
        """The JSON record of where the noise came from."""
        return {"kind": "measured", "estimator": ESTIMATOR, "configs": self.configs,
                "repeats": self.repeats, "files": list(self.files),
                "per_file": [{"file": f, "configs": c, "repeats": r, "cv": v}
                             for f, c, r, v in self.per_file],
                "skipped": list(self.skipped)}


def recorded_files(folder: str | os.PathLike[str] = LANDSCAPES) -> list[str]:
    """The recorded real landscapes of a folder (``recorded-h200-*.json``), sorted."""
    return sorted(str(p) for p in Path(folder).glob(RECORDED_GLOB))


def _repeat_groups(path: str) -> tuple[list[list[float]], list[str]]:
    """Each usable record's repeats, and why any record was left out."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    records = data.get("records") if isinstance(data, dict) else None
    if not isinstance(records, list):
        raise ValueError(f"{path}: no records list (not an autotune-landscape/1 file)")
    groups, why = [], []
    failed = short = 0
    for rec in records:
        reps = rec.get("output_tok_s_repeats") if isinstance(rec, dict) else None
        if not isinstance(rec, dict) or rec.get("status") == "failed" or rec.get("output_tok_s") is None:
            failed += 1
        elif not isinstance(reps, list) or len([r for r in reps if r is not None]) < 2:
            short += 1
        else:
            groups.append([float(r) for r in reps if r is not None])
    if failed:
        why.append(f"{os.path.basename(path)}: {failed} failed record(s) left out (no tok/s)")
    if short:
        why.append(f"{os.path.basename(path)}: {short} record(s) with fewer than 2 repeats left "
                   "out (no spread)")
    return groups, why


def measured_noise(files: Sequence[str | os.PathLike[str]] | None = None) -> MeasuredNoise:
    """The noise CV of the recorded landscapes' repeats (:func:`pooled_log_sd`, pooled over all).

    Args:
        files: Landscape files; default :func:`recorded_files` (the committed real H200 ones).

    Raises:
        ValueError: No file given or found, or no config in them with two repeats.
    """
    paths = [str(f) for f in (recorded_files() if files is None else files)]
    if not paths:
        raise ValueError(f"no recorded landscapes ({RECORDED_GLOB}) in {LANDSCAPES} to measure the "
                         "noise from; give --noise CV")
    groups: list[list[float]] = []
    used_files, per_file, skipped = [], [], []
    for path in paths:
        mine, why = _repeat_groups(path)
        skipped += why
        if not mine:
            skipped.append(f"{os.path.basename(path)}: no config with 2 repeats or more, file "
                           "left out")
            continue
        sd, n, m = pooled_log_sd(mine)
        used_files.append(path)
        per_file.append((path, n, m, sd))
        groups += mine
    if not groups:
        raise ValueError(f"none of {', '.join(paths)} has a config with 2 repeats or more; give "
                         "--noise CV")
    cv, configs, repeats = pooled_log_sd(groups)
    return MeasuredNoise(cv=cv, configs=configs, repeats=repeats, files=tuple(used_files),
                         per_file=tuple(per_file), skipped=tuple(skipped))
