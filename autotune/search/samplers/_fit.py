"""The phase model: fit the speculative cycle from finished trials, predict every candidate.

A candidate's output tok/s is modelled in four parts, each fitted from what trials report:

1. **Group speed** (non-speculative settings: TP, NCCL, backends): the log of each group's
   baseline tok/s and decode-step ms as a sum of one effect per setting value (Bayesian linear
   regression, one-hot features). Measured groups are pinned by their baselines; unmeasured ones
   are predicted from the values they share with measured ones, with a spread for values never
   seen.
2. **Cycle time** relative to the group's decode step (:mod:`autotune.search.samplers._cycle`):
   draft ``~ 1, s, s(k-1)``; verify ``~ 1, 1 - exp(-c (N - 1)), N - 1, N [k > 1]`` (a monotone
   curve: flat for a dense target, rising then saturating for a MoE one, whose experts
   saturate); re-extend ``~ 1, s + 1``; other ``~ 1``.
3. **Accept length** (:mod:`autotune.search.samplers._acceptance`).
4. **Throughput line**: per-token wall time ``1 / tok_s = a * cycle_ms / accept + b`` (``b`` is
   prefill and scheduling overhead), fitted over every trial and baseline.

What the physics does not explain (a setting's effect on the speculative cycle beyond the decode
step it changes) is a per-value multiplicative factor fitted on the residuals. Which configs
are likely to fail is :mod:`autotune.search.samplers._failures`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.search.samplers import _blr
from autotune.search.samplers._acceptance import AcceptancePredictor, AcceptObs
from autotune.search.samplers._candidates import CandidateTable
from autotune.search.samplers._cycle import CycleModel
from autotune.search.samplers._failures import failure_probability
from autotune.search.samplers._observations import Observation
from autotune.trial.outcome import Status


@dataclass
class Settings:
    """Knobs of the fit (defaults are deliberately generic, not fitted to any profile).

    Attributes:
        noise_sd: Expected relative measurement noise of tok/s (log scale).
        group_sd: Prior spread of one setting value's effect on baseline speed (log scale).
        residual_sd: Prior spread of one value's extra effect on the speculative cycle.
        tp_doubling, tp_doubling_sd: Prior log speed-up of doubling ``tp_size`` (and spread).
        local_sd, local_length: Amplitude and length (in config steps) of the local residual.
    """

    noise_sd: float = 0.03
    group_sd: float = 0.07
    residual_sd: float = 0.05
    tp_doubling: float = 0.2
    tp_doubling_sd: float = 0.3
    local_sd: float = 0.04
    local_length: float = 2.0


@dataclass
class Prediction:
    """Log tok/s predictions for every candidate and group.

    Attributes:
        mu, sd: Per candidate (a baseline candidate gets its group's baseline).
        base_mu, base_sd: Per group, the baseline.
        group_measured: Per group, whether its baseline was measured.
        p_fail: Per candidate, probability it fails to run.
        incumbent: Best measured feasible log tok/s, or None.
        physics_ready: Whether the cycle model was fitted from phase data.
    """

    mu: np.ndarray
    sd: np.ndarray
    base_mu: np.ndarray
    base_sd: np.ndarray
    group_measured: np.ndarray
    p_fail: np.ndarray
    incumbent: float | None
    physics_ready: bool


def _group_data(table: CandidateTable, obs: Sequence[Observation]) -> tuple[dict, dict]:
    """Per group: measured baseline log tok/s values and log decode-step values."""
    b: dict[int, dict[float, float | None]] = {}
    for o in obs:
        if o.index is None:
            continue
        g = int(table.group[o.index])
        if o.is_baseline and o.ok:
            cyc = o.phases.get("cycle_ms")
            b.setdefault(g, {})[o.measured] = cyc
        elif o.baseline_tok_s is not None:
            b.setdefault(g, {})[o.baseline_tok_s] = o.baseline_decode_step_ms
    logb = {g: [float(np.log(v)) for v in vals] for g, vals in b.items()}
    logd = {g: [float(np.log(d)) for d in vals.values() if d] for g, vals in b.items()}
    return logb, {g: v for g, v in logd.items() if v}


def _tp_feature(table: CandidateTable) -> np.ndarray | None:
    """log2(tp_size) per group (centred), or None when TP is not searched."""
    for col, j in enumerate(table.group_dims):
        d = table.dims[j]
        if d.name == "tp_size" and all(isinstance(v, int) and v > 0 for v in d.values):
            tp = np.array([float(d.values[c]) if c >= 0 else np.nan
                           for c in table.group_coords[:, col]])
            logs = np.log2(tp)
            return np.nan_to_num(logs - np.nanmean(logs))
    return None


def _group_regression(table: CandidateTable, data: dict[int, list[float]], s: Settings, *,
                      sign: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-group log speed (``sign`` +1) or log step time (-1), from the measured groups."""
    G = len(table.groups)
    cols = [np.ones((G, 1)), table.one_hot(table.group_coords, table.group_dims)]
    tp = _tp_feature(table)
    if tp is not None:
        cols.append(tp[:, None])
    X_all = np.concatenate(cols, axis=1)
    if not data:
        return np.full(G, np.nan), np.full(G, np.inf)
    rows, ys = [], []
    for g, vals in data.items():
        for v in vals:
            rows.append(X_all[g])
            ys.append(v)
    y = np.array(ys)
    p = X_all.shape[1]
    m0 = np.zeros(p)
    m0[0] = float(np.mean(y))
    s0 = np.full(p, s.group_sd)
    s0[0] = 1.0
    if tp is not None:
        # Physics prior: TP shards the weight-bound decode, so each doubling speeds it up, less
        # than 2x because all-reduces grow; the data can overrule it (a small model on PCIe).
        m0[-1], s0[-1] = sign * s.tp_doubling, s.tp_doubling_sd
    post = _blr.fit(np.array(rows), y, s.noise_sd, prior_mean=m0, prior_sd=s0)
    mu, var = post.predict(X_all)
    return mu, np.sqrt(var)


def _local_residual(table: CandidateTable, rows: np.ndarray, obs_rows: np.ndarray,
                    resid: np.ndarray, s: Settings) -> tuple[np.ndarray, np.ndarray]:
    """GP posterior of the physics residual at ``rows`` (exponential kernel on config distance)."""
    amp2 = s.local_sd ** 2
    dist = np.stack([table.distance(int(rows[r]))[rows] for r in obs_rows])  # (n_obs, len(rows))
    k_cross = amp2 * np.exp(-dist / s.local_length)
    K = k_cross[:, obs_rows] + s.noise_sd ** 2 * np.eye(len(obs_rows))
    solve = np.linalg.solve(K, np.concatenate([resid[:, None], k_cross], axis=1))
    mean = k_cross.T @ solve[:, 0]
    var = amp2 - np.einsum("ij,ij->j", k_cross, solve[:, 1:])
    return mean, np.maximum(var, 0.0)


def _cycle_targets(phys_obs: Sequence[Observation], dstep: np.ndarray) -> tuple[np.ndarray, bool]:
    """Per-phase (or whole-cycle) times of each trial, in units of its group's decode step."""
    split = all(all(o.phases.get(p) is not None for p in ("draft_ms", "verify_ms", "extend_ms"))
                for o in phys_obs)
    if not split:
        return np.array([[o.phase("cycle_ms")] for o in phys_obs]) / dstep[:, None], False
    cols = []
    for o in phys_obs:
        ph = o.phases
        other = ph.get("other_ms")
        if other is None:
            other = o.phase("cycle_ms") - o.phase("draft_ms") - o.phase("verify_ms") - o.phase("extend_ms")
        cols.append([ph["draft_ms"], ph["verify_ms"], ph["extend_ms"], other])
    return np.array(cols) / dstep[:, None], True


def _throughput_line(phys_obs: Sequence[Observation], logb: dict, logd: dict) -> tuple[float, float]:
    """``1 / tok_s = a * (cycle ms per token) + b`` over every trial and measured baseline."""
    xs, us = [], []
    for o in phys_obs:
        if o.accept_length is None:  # phys_obs have phase data, accept length included
            raise ValueError(f"trial {o.number} has no accept length")
        xs.append(o.phase("cycle_ms") / o.accept_length)
        us.append(1.0 / o.measured)
    for g, vals in logb.items():
        if g in logd:
            for v in vals:
                xs.append(float(np.exp(np.mean(logd[g]))))
                us.append(float(np.exp(-v)))
    x, u = np.array(xs), np.array(us)
    a0 = float(np.median(u / x))
    line = _blr.fit(np.stack([x, np.ones_like(x)], axis=1), u, 0.02 * u,
                    prior_mean=np.array([a0, 0.0]),
                    prior_sd=np.array([a0, 0.2 * float(np.median(u))]),
                    nonneg=np.array([True, True]))
    return float(line.mean[0]), float(line.mean[1])


def _physics(table: CandidateTable, obs: Sequence[Observation], phys_obs: list[Observation],
             accept: AcceptancePredictor, logb: dict, logd: dict, d_mu: np.ndarray,
             d_sd: np.ndarray, s: Settings) -> tuple[np.ndarray, np.ndarray]:
    """Log tok/s mean and spread of every physics candidate (``table.physics``)."""
    phys = np.flatnonzero(table.physics)
    accept.fit([AcceptObs(int(table.steps[o.cand]), int(table.topk[o.cand]),
                          int(table.draft[o.cand]), o.accept_length, o.histogram)
                for o in obs if table.physics[o.cand] and o.status != Status.FAILED])
    idx = np.array([o.cand for o in phys_obs])
    dstep = np.array([o.baseline_decode_step_ms or float(np.exp(d_mu[table.group[o.cand]]))
                      for o in phys_obs])
    y, split = _cycle_targets(phys_obs, dstep)
    cycle = CycleModel()
    cycle.fit(table.steps[idx], table.topk[idx], table.draft[idx], y, split)
    a, b = _throughput_line(phys_obs, logb, logd)

    # Cycle and acceptance depend on (s, k, N) only: predict each distinct triple once.
    triples = np.stack([table.steps[phys], table.topk[phys], table.draft[phys]], axis=1)
    uniq, inverse = np.unique(triples, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    rho_u, rho_var_u = cycle.predict(uniq[:, 0], uniq[:, 1], uniq[:, 2])
    acc_u, acc_var_u = accept.predict(uniq[:, 0], uniq[:, 1], uniq[:, 2])
    rho, rho_var = rho_u[inverse], rho_var_u[inverse]
    acc, acc_var = acc_u[inverse], acc_var_u[inverse]
    gp = table.group[phys]
    x = np.exp(d_mu[gp]) * rho / acc
    u = a * x + b
    frac = a * x / u
    mu = -np.log(u)
    var = frac ** 2 * (d_sd[gp] ** 2 + rho_var / rho ** 2 + acc_var / acc ** 2)

    # What the physics leaves unexplained, per setting value (e.g. an NCCL algorithm that
    # speeds multi-token verify more than the one-token decode step).
    pos = {int(c): i for i, c in enumerate(phys)}
    rows = np.array([pos[o.cand] for o in phys_obs])
    resid = np.log([o.measured for o in phys_obs]) - mu[rows]
    dims = table.group_dims + table.extra_spec_dims
    X_all = table.one_hot(table.coords[phys][:, dims], dims)
    if X_all.shape[1]:
        post = _blr.fit(X_all[rows], resid, s.noise_sd, prior_mean=np.zeros(X_all.shape[1]),
                        prior_sd=np.full(X_all.shape[1], s.residual_sd))
        r_mu, r_var = post.predict(X_all)
        resid = resid - X_all[rows] @ post.mean
        mu, var = mu + r_mu, var + r_var
    # Whatever is left is local: a Gaussian process over config distance carries each
    # measured point's misfit to its neighbours, and nowhere else.
    g_mu, g_var = _local_residual(table, phys, rows, resid, s)
    return mu + g_mu, np.sqrt(var + g_var + 0.01 ** 2)


def _factor_model(table: CandidateTable, obs: Sequence[Observation], rows: np.ndarray,
                  base_mu: np.ndarray, s: Settings) -> tuple[np.ndarray, np.ndarray]:
    """Speculative candidates the physics cannot cover (or all, before any phase data): one
    multiplicative factor per setting value, fitted on measured tok/s."""
    spec_obs = [o for o in obs if table.spec[o.cand] and o.ok]
    if not spec_obs:
        ref = base_mu[table.group[rows]]
        return np.where(np.isfinite(ref), ref, 0.0), np.full(len(rows), 0.5)
    dims = list(range(len(table.dims)))
    X_all = np.concatenate([np.ones((len(table), 1)), table.one_hot(table.coords, dims)], axis=1)
    y = np.log([o.measured for o in spec_obs])
    m0 = np.zeros(X_all.shape[1])
    m0[0] = float(np.mean(y))
    s0 = np.full(X_all.shape[1], 0.15)
    s0[0] = 0.5
    post = _blr.fit(X_all[[o.cand for o in spec_obs]], y, s.noise_sd, prior_mean=m0,
                    prior_sd=s0)
    m, v = post.predict(X_all[rows])
    return m, np.sqrt(v + 0.05 ** 2)


def _incumbent(table: CandidateTable, obs: Sequence[Observation], mu: np.ndarray,
               sd: np.ndarray, base_mu: np.ndarray, logb: dict, s: Settings) -> float | None:
    """Best feasible measured config, each measurement shrunk towards the model (a lucky noisy
    reading should not stop the search from trying what could truly beat it)."""
    best = None
    for o in obs:
        if not o.ok or not (o.status == Status.FEASIBLE or o.is_baseline) or not table.spec[o.cand]:
            continue
        y = float(np.log(o.measured))
        m, v = mu[o.cand], sd[o.cand] ** 2
        if np.isfinite(m) and np.isfinite(v) and v > 0:
            n2 = s.noise_sd ** 2
            y = (m / v + y / n2) / (1 / v + 1 / n2)
        best = y if best is None else max(best, y)
    for g in logb:
        best = float(base_mu[g]) if best is None else max(best, float(base_mu[g]))
    return best


def predict(table: CandidateTable, obs: Sequence[Observation], accept: AcceptancePredictor,
            settings: Settings) -> Prediction:
    """Fit every part from ``obs`` and predict all candidates (log tok/s).

    Args:
        table: The candidates.
        obs: Finished trials (those without a candidate index are ignored).
        accept: The acceptance model (refitted in place, warm-started from its last fit).
        settings: Noise and prior spreads.
    """
    s = settings
    obs = [o for o in obs if o.index is not None]
    logb, logd = _group_data(table, obs)
    base_mu, base_sd = _group_regression(table, logb, s, sign=1.0)
    d_mu, d_sd = _group_regression(table, logd, s, sign=-1.0)
    measured = np.zeros(len(table.groups), dtype=bool)
    measured[list(logb)] = True

    mu = np.full(len(table), np.nan)
    sd = np.full(len(table), np.inf)
    # Baseline candidates (speculation off in the config itself) are their group's baseline.
    base_idx = np.flatnonzero(~table.spec)
    mu[base_idx] = base_mu[table.group[base_idx]]
    sd[base_idx] = base_sd[table.group[base_idx]]

    phys_obs = [o for o in obs if table.physics[o.index] and o.ok and o.has_phase_data]
    physics_ready = bool(phys_obs) and bool(np.isfinite(d_mu).all())
    if physics_ready:
        phys = np.flatnonzero(table.physics)
        mu[phys], sd[phys] = _physics(table, obs, phys_obs, accept, logb, logd, d_mu, d_sd, s)
    rest = np.flatnonzero(table.spec & ~np.isfinite(mu))
    if len(rest):
        mu[rest], sd[rest] = _factor_model(table, obs, rest, base_mu, s)

    return Prediction(mu=mu, sd=sd, base_mu=base_mu, base_sd=base_sd, group_measured=measured,
                      p_fail=failure_probability(table, obs),
                      incumbent=_incumbent(table, obs, mu, sd, base_mu, logb, s),
                      physics_ready=physics_ready)
