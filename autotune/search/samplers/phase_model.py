"""``PhaseModelSampler``: propose the config the fitted speculative-cycle model likes best.

Every trial reports its phase profile and accept data as Optuna user attrs (``docs/samplers.md``).
From them the sampler fits the cycle's physics (:mod:`autotune.search.samplers._fit`), predicts the
output tok/s of every config of the space with a spread, and proposes the config with the largest
expected improvement per trial spent, with:

- a short designed start in one group: a short chain, a long chain and a wide tree, which pin the
  verify cost curve and the per-depth acceptance; a designed config the model already puts far
  below the incumbent is skipped as soon as any speculative run (the warm start too) can be fitted,
  the rest then run in the order of the model's acquisition instead of the fixed one, and the long
  chain is dropped when such a run already drafted as deep;
- the cost of a new non-speculative group counted as two trials (its baseline is measured first);
  its baseline is a candidate winner too, so groups are explored when their baseline alone might
  win;
- configs whose setting values made other configs fail (out of memory, unsupported) discounted,
  the blame explained away (a value that only ran beside the cause of several failures is cleared);
  a baseline out of memory blames the server's arguments before the environment, and smaller TPs;
- every few trials without progress, the best untried neighbour of the incumbent, which corrects a
  model that is wrong in a way its spread does not show;
- no config proposed twice.

With no phase data at all (user attrs absent) it hands every choice to a TPE sampler.
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING

import numpy as np
from optuna.samplers import BaseSampler, TPESampler
from optuna.study import Study
from optuna.trial import FrozenTrial

from autotune.search.samplers import _fit
from autotune.search.samplers._acceptance import AcceptancePredictor
from autotune.search.samplers._observations import PLAN_KEY, finished, occupied, read_observation
from autotune.search.samplers._planned import PlannedSampler
from autotune.search.stopping import Evidence
from autotune.trial.outcome import Status

if TYPE_CHECKING:
    from autotune.space.search_space import SearchSpace

_SQRT2 = math.sqrt(2.0)


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    """E[max(Y - best, 0)] for Y ~ N(mu, sd) (elementwise; sd may be 0)."""
    sd = np.maximum(sd, 1e-9)
    z = (mu - best) / sd
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + _erf(z / _SQRT2))
    return sd * (pdf + z * cdf)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to 1.5e-7 (Abramowitz and Stegun 7.1.26), vectorised without scipy."""
    x = np.asarray(x, dtype=float)
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                                                                         + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


class PhaseModelSampler(PlannedSampler):
    """An Optuna sampler that models the speculative cycle from the trials' phase profiles.

    Args:
        space: The loaded ``SearchSpace``; its enumeration is the candidate set.
        seed: Seed for tie-breaking and the fallback TPE sampler.
        n_startup: Designed configs to run first (short chain, long chain, wide tree).
        short_chain: Steps of the designed short chain (the nearest the space allows); None: a
            quarter of the way up the space's own range of chain steps (:meth:`short_chain_steps`).
        skip_z: A designed config is skipped once the model fitted on the first ones puts it
            ``skip_z`` spreads below the incumbent (None: always run the whole design).
        patience: Trials without improvement after which a neighbour of the incumbent is tried
            (then every ``patience + 1`` trials while stuck).
        settings: Fit settings (noise and prior spreads).
        fallback: Sampler for parameters outside the plan and for studies without phase data;
            TPE with ``seed`` if None.
    """

    def __init__(self, space: SearchSpace, *, seed: int | None = None, n_startup: int = 3,
                 patience: int = 2, short_chain: int | None = None, skip_z: float | None = 2.0,
                 settings: _fit.Settings | None = None,
                 fallback: BaseSampler | None = None) -> None:
        super().__init__(space, seed=seed,
                         fallback=fallback if fallback is not None else TPESampler(seed=seed))
        if n_startup < 0:
            raise ValueError(f"n_startup must be >= 0, got {n_startup}")
        if patience < 1:
            raise ValueError(f"patience must be >= 1, got {patience}")
        self.n_startup = n_startup
        self.short_chain = short_chain
        self.skip_z = skip_z
        self.patience = patience
        self.settings = settings or _fit.Settings()
        self._rng = np.random.RandomState(seed)
        self._accept: AcceptancePredictor | None = None
        self._design: list[int] | None = None
        self.last_reason: str | None = None  # why the last plan was chosen (for tests and logs)

    # ------------------------------------------------------------------ design
    def _start_group(self) -> int:
        t = self.table
        want = []
        for j in t.group_dims:
            d = t.dims[j]
            if d.name == "tp_size":
                # The largest TP shards the weights most: it is the one most likely to fit and,
                # for a memory-bound decode, the fastest.
                want.append(int(np.argmax([v if isinstance(v, (int, float)) else -1
                                           for v in d.values])))
            elif None in d.values:
                want.append(d.values.index(None))  # the server's own default
            else:
                want.append(0)
        if not len(t.group_dims):
            return 0
        dist = np.abs(t.group_coords - np.array(want)[None, :]).sum(axis=1)
        return int(np.argmin(dist))

    def design(self) -> list[int]:
        """The designed start: candidate indices of a short chain, a long chain, a wide tree."""
        if self._design is not None:
            return self._design
        t = self.table
        g0 = self._start_group()
        pool = np.flatnonzero(t.physics & (t.group == g0))
        if len(pool) and t.extra_spec_dims:
            # Other speculative settings at their default (unset, else the first value).
            score = np.zeros(len(pool))
            for j in t.extra_spec_dims:
                d = t.dims[j]
                default = d.values.index(None) if None in d.values else 0
                score += t.coords[pool, j] != default
            pool = pool[score == score.min()]
        out: list[int] = []
        if len(pool):
            k = t.topk[pool]
            kmin, kmax = k.min(), k.max()
            chain = pool[k == kmin]
            cs = t.steps[chain]
            target = self.short_chain if self.short_chain is not None else self.short_chain_steps(cs)
            out.append(int(chain[np.lexsort((t.draft[chain],
                                             np.abs(cs - target) + 0.1 * (cs > target)))][0]))
            out.append(int(chain[np.lexsort((t.draft[chain], -cs))][0]))
            if kmax > kmin:
                tree = pool[k == kmax]
                ts = t.steps[tree]
                mid = np.median(np.unique(ts))
                out.append(int(tree[np.lexsort((-t.draft[tree], np.abs(ts - mid)))][0]))
        seen: list[int] = []
        for i in out:
            if i not in seen:
                seen.append(i)
        self._design = seen
        return seen

    @staticmethod
    def short_chain_steps(steps: np.ndarray) -> float:
        """The designed short chain's steps when none is given: the lower quartile of the chain steps
        the space offers (with the longest chain and a middle tree, the design then spans the range).

        It was a constant 2, the step count of the Kimi space's optimum, so the design proposed
        that optimum's shape first. The quartile follows each space's own range instead; it was
        chosen with the shipped spaces in view (docs/samplers.md says which figures that affects).
        """
        values = np.unique(steps)
        return float(values.min() + 0.25 * (values.max() - values.min()))

    def _depth_covered(self, i: int, spec_runs: list) -> bool:
        """Whether designed config ``i`` is the design's long chain and a speculative run with
        phase data (the warm start) already drafted as deep: the long chain is there to pin the
        acceptance at the deepest steps, which that run's accept data pins already."""
        t = self.table
        design = self.design()
        if len(design) < 2 or i != design[1]:
            return False
        return any(o.has_phase_data and t.physics[o.index] and t.steps[o.index] >= t.steps[i]
                   for o in spec_runs)

    # ------------------------------------------------------------------ stop rule
    def stop_evidence(self, study: Study) -> Evidence:
        """The model's bound on every config not yet measured (nor running) that it expects to
        run (failure probability below one half), for :func:`autotune.search.stopping.decide`.

        A baseline of a measured group is its measurement, not a config left to try; a new
        group's baseline is, with its predicted spread.
        """
        t = self.table
        trials = study.get_trials(deepcopy=False)
        obs = [read_observation(ft, self.trial_index(ft)) for ft in trials if finished(ft)]
        taken = np.zeros(len(t), dtype=bool)
        for ft in trials:
            idx = self.trial_index(ft) if occupied(ft) else None
            if idx is not None:
                taken[idx] = True
        spec_measured = sum(1 for o in obs if o.index is not None and t.spec[o.index]
                            and o.ok and o.has_phase_data)
        baselines = sum(1 for o in obs if o.ok and (o.is_baseline or o.baseline_tok_s is not None))
        # A copy: the acceptance fit warm-starts from its last one, and asking whether to stop must
        # not move what the sampler proposes next.
        accept = (copy.deepcopy(self._accept) if self._accept is not None else
                  AcceptancePredictor(max(int(t.steps.max()), 1), max(int(t.topk.max()), 1)))
        pred = _fit.predict(t, obs, accept, self.settings)
        measured_group = pred.group_measured[t.group]
        left = ~taken & (pred.p_fail < 0.5) & ~(~t.spec & measured_group)
        return Evidence(mu=pred.mu[left], sd=pred.sd[left], incumbent=pred.incumbent,
                        fitted=pred.physics_ready, baselines=baselines, speculative=spec_measured)

    # ------------------------------------------------------------------ planning
    def plan(self, study: Study, trial: FrozenTrial) -> int | None:
        t = self.table
        tried = self.tried(study, trial)
        obs = [read_observation(ft, self.trial_index(ft))
               for ft in study.get_trials(deepcopy=False)
               if finished(ft) and ft.number != trial.number]
        obs.sort(key=lambda o: o.number)
        if tried.all():
            self.last_reason = "exhausted"
            return None
        spec_runs = [o for o in obs if o.index is not None and t.spec[o.index]
                     and o.status != Status.FAILED]
        if spec_runs and not any(o.has_phase_data for o in spec_runs):
            self.last_reason = "no phase data: fallback"
            return None
        if self._accept is None:
            self._accept = AcceptancePredictor(max(int(t.steps.max()), 1), max(int(t.topk.max()), 1))
        # The design phase lasts until the first model-based proposal.
        designing = all((ft.system_attrs.get(PLAN_KEY) or {}).get("reason", "design") == "design"
                        for ft in study.get_trials(deepcopy=False) if ft.number != trial.number)
        pending = [i for i in self.design()[:self.n_startup] if not tried[i]] if designing else []
        pending = [i for i in pending if not self._depth_covered(i, spec_runs)]
        pred = None
        # The skip rule applies once the model has a speculative run to fit: a designed one, or
        # one the search ran before the design (SGLang's default, the warm start).
        started = len(pending) < len(self.design()[:self.n_startup]) or any(
            o.has_phase_data for o in spec_runs)
        if pending and started and self.skip_z is not None:
            pred = _fit.predict(t, obs, self._accept, self.settings)
            if pred.physics_ready and pred.incumbent is not None:
                pending = [i for i in pending
                           if pred.mu[i] + self.skip_z * pred.sd[i] >= pred.incumbent]
        if pending and pred is not None and pred.physics_ready:
            # The fixed order (short chain, long chain, wide tree) is for a study with nothing to
            # fit yet. Once a speculative run can be fitted, the model's own acquisition (expected
            # improvement per trial) ranks the designed configs that are left; no threshold.
            acq_d = self._acquisition(pred)
            pending = sorted(pending, key=lambda i: -acq_d[i])
        if pending:
            self.last_reason = "design"
            return pending[0]
        if pred is None:
            pred = _fit.predict(t, obs, self._accept, self.settings)
        acq = self._acquisition(pred)
        acq[tried] = -np.inf
        if not np.isfinite(acq).any():
            self.last_reason = "nothing left the model can rank"
            return None
        neighbour = self._neighbour_move(obs, pred, acq)
        if neighbour is not None:
            self.last_reason = "neighbour"
            return neighbour
        self.last_reason = "model"
        jitter = self._rng.uniform(0, 1e-12, size=len(acq))
        return int(np.argmax(np.where(np.isfinite(acq), acq + jitter, -np.inf)))

    def _acquisition(self, pred: _fit.Prediction) -> np.ndarray:
        t = self.table
        finite = np.isfinite(pred.mu)
        if pred.incumbent is not None:
            best = pred.incumbent
        elif finite.any():
            best = float(np.max(pred.mu[finite]))
        else:
            best = 0.0
        mu = np.where(finite, pred.mu, best)
        sd = np.where(np.isfinite(pred.sd), pred.sd, 1.0)
        ei = expected_improvement(mu, sd, best)
        g = t.group
        new_group = ~pred.group_measured[g]
        bmu, bsd = pred.base_mu[g], pred.base_sd[g]
        base_known = np.isfinite(bmu)
        ei_base = expected_improvement(np.where(base_known, bmu, best),
                                       np.where(base_known & np.isfinite(bsd), bsd, 0.1), best)
        spec_new = t.spec & new_group
        ei = np.where(spec_new, np.maximum(ei, ei_base), ei)
        cost = np.where(spec_new, 2.0, 1.0)
        acq = ei * (1 - pred.p_fail) / cost
        # A baseline config of a measured group would only repeat that baseline.
        acq[~t.spec & ~new_group] = -np.inf
        return acq

    def _neighbour_move(self, obs: list, pred: _fit.Prediction, acq: np.ndarray) -> int | None:
        t = self.table
        best_val, best_idx, since = -np.inf, None, 0
        for o in obs:
            if o.index is None or not o.ok or not t.spec[o.index] or o.status != Status.FEASIBLE:
                since += 1
                continue
            if o.value > best_val:
                best_val, best_idx, since = o.value, o.index, 0
            else:
                since += 1
        if best_idx is None or since < self.patience or (since - self.patience) % (self.patience + 1):
            return None
        near = (t.distance(best_idx) == 1) & np.isfinite(acq)
        if not near.any():
            return None
        score = np.where(near & (pred.p_fail < 0.5), pred.mu, -np.inf)
        if not np.isfinite(score).any():
            return None
        return int(np.argmax(score))
