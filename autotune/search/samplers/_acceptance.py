"""How many tokens a speculative cycle yields, fitted from the accept data trials report.

The draft proposes a chain (top-k 1) or a tree (top-k > 1) of ``N - 1`` tokens over ``s`` steps.
The model has five parameters:

- the top-1 draft token at depth ``d`` is accepted with probability
  ``q_d = sigmoid(alpha + beta * (d - 1) + gamma * [d >= 2])``: a first-position rate, a per-depth
  drift, and a jump after the first position (acceptance is correlated along a chain);
- a tree's extra candidates at one depth recover a share ``rho`` of the top-1 misses, the j-th
  extra one ``lam ** (j - 1)`` of the first one's share.

The tree keeps the ``N - 1`` nodes with the highest path score (top-1 reach to the parent times the
node's own marginal acceptance), as SGLang keeps the ``N - 1`` best-scoring draft nodes. The
expected tokens per cycle are ``1 + sum_d prod_{i <= d} cover_i(width_i)``.

Data: each trial's mean accept length (tokens per cycle, bonus token included) and, when present,
``spec_correct_drafts_histogram`` (cycles that accepted j drafts), whose tail gives the reach of
every depth directly. The fit is a maximum a posteriori Gauss-Newton fit with a Laplace
covariance, so predictions come with a spread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Prior mean and spread of (alpha, beta, gamma, logit rho, logit lam). Broad on purpose: a draft
#: may accept 20% or 90% of first tokens, and decay fast or hardly at all.
#: Per-candidate integers: a list, or a column of the candidate table.
IntsLike = Sequence[int] | np.ndarray

PRIOR_MEAN = np.array([0.6, -0.15, 0.0, 0.0, 0.0])
PRIOR_SD = np.array([1.5, 0.4, 1.0, 1.5, 1.5])
_N_EFF_CAP = 300.0  # a histogram of thousands of cycles still mixes prompts: cap its weight


def _sigmoid(x: np.ndarray | float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


def reach_counts(histogram: Sequence[float] | np.ndarray) -> np.ndarray:
    """Cycles that accepted at least ``d`` drafts, ``d = 0..len - 1``, from a histogram of cycles
    that accepted exactly ``j`` (``spec_correct_drafts_histogram``): the one reading of that
    histogram, shared by this fit and the measured acceptance profile
    (:mod:`autotune.search.acceptance_profile`)."""
    h = np.asarray(histogram, dtype=float)
    return np.cumsum(h[::-1])[::-1]


@dataclass(frozen=True)
class AcceptObs:
    """One trial's accept data.

    Attributes:
        steps, topk, draft_tokens: The speculative settings.
        accept_length: Mean tokens per cycle (bonus token included), or None.
        histogram: Cycles that accepted j draft tokens, j = 0..; or None.
    """

    steps: int
    topk: int
    draft_tokens: int
    accept_length: float | None
    histogram: tuple[float, ...] | None = None


class AcceptancePredictor:
    """Vectorised accept-length prediction for many (steps, topk, draft tokens) at once.

    Args:
        max_steps: Largest number of steps any candidate uses.
        max_topk: Largest top-k any candidate uses.
    """

    def __init__(self, max_steps: int, max_topk: int) -> None:
        self.S = max(int(max_steps), 1)
        self.K = max(int(max_topk), 1)
        self.theta = PRIOR_MEAN.copy()
        self.cov = np.diag(PRIOR_SD ** 2)
        self.n_obs = 0

    # ------------------------------------------------------------------ prediction
    def _tables(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Path scores (S, K) and coverage (S, K + 1) for one parameter vector."""
        a, b, g, rl, ll = theta
        d = np.arange(self.S)
        q = _sigmoid(a + b * d + g * (d >= 1))
        rho, lam = _sigmoid(rl), _sigmoid(ll)
        w = np.arange(1, self.K + 1)
        # Marginal coverage of the w-th candidate at a depth: q, then shares of the misses.
        extra = (1 - q)[:, None] * rho * (1 - lam) * lam ** np.maximum(w - 2, 0)[None, :]
        marginal = np.where(w[None, :] == 1, q[:, None], extra)
        cover = np.concatenate([np.zeros((self.S, 1)), np.cumsum(marginal, axis=1)], axis=1)
        reach_top1 = np.concatenate([[1.0], np.cumprod(q)[:-1]])
        scores = reach_top1[:, None] * marginal
        return scores, np.minimum(cover, 0.999)

    def _widths(self, scores: np.ndarray, steps: np.ndarray, topk: np.ndarray,
                draft: np.ndarray) -> np.ndarray:
        order = np.argsort(-scores, axis=None, kind="stable")
        depth_of = order // self.K
        rank_of = order % self.K
        allowed = (depth_of[None, :] < steps[:, None]) & (rank_of[None, :] < topk[:, None])
        picked = allowed & (np.cumsum(allowed, axis=1) <= (draft - 1)[:, None])
        widths = np.zeros((len(steps), self.S), dtype=int)
        for d in range(self.S):
            widths[:, d] = np.sum(picked & (depth_of[None, :] == d), axis=1)
        return widths

    def reach(self, steps: IntsLike, topk: IntsLike, draft: IntsLike,
              theta: np.ndarray | None = None) -> np.ndarray:
        """P(at least d drafts accepted), d = 1..S, shape (C, S)."""
        theta = self.theta if theta is None else theta
        steps_a = np.minimum(np.asarray(steps, dtype=int), self.S)
        topk_a = np.minimum(np.asarray(topk, dtype=int), self.K)
        draft_a = np.asarray(draft, dtype=int)
        scores, cover = self._tables(theta)
        widths = self._widths(scores, steps_a, topk_a, draft_a)
        per_depth = cover[np.arange(self.S)[None, :], widths]
        return np.cumprod(per_depth, axis=1)

    def mean(self, steps: IntsLike, topk: IntsLike, draft: IntsLike,
             theta: np.ndarray | None = None) -> np.ndarray:
        """Expected tokens per cycle, bonus token included, shape (C,)."""
        return 1.0 + self.reach(steps, topk, draft, theta).sum(axis=1)

    def predict(self, steps: IntsLike, topk: IntsLike,
                draft: IntsLike) -> tuple[np.ndarray, np.ndarray]:
        """Mean accept length and its variance (parameter uncertainty) for each candidate."""
        mu = self.mean(steps, topk, draft)
        grads = np.empty((len(mu), len(self.theta)))
        for j in range(len(self.theta)):
            step = np.zeros_like(self.theta)
            step[j] = 1e-3
            grads[:, j] = (self.mean(steps, topk, draft, self.theta + step) - mu) / 1e-3
        var = np.einsum("ij,jk,ik->i", grads, self.cov, grads)
        return mu, np.maximum(var, 0.0)

    # ------------------------------------------------------------------ fitting
    def _residuals(self, theta: np.ndarray, obs: Sequence[AcceptObs]) -> np.ndarray:
        steps = np.array([o.steps for o in obs])
        topk = np.array([o.topk for o in obs])
        draft = np.array([o.draft_tokens for o in obs])
        reach = self.reach(steps, topk, draft, theta)
        out: list[float] = []
        for i, o in enumerate(obs):
            if o.accept_length is not None:
                pred = 1.0 + reach[i].sum()
                out.append((o.accept_length - pred) / (0.02 * o.accept_length + 0.01))
            if o.histogram:
                h = np.asarray(o.histogram, dtype=float)
                total = h.sum()
                if total <= 0:
                    continue
                tail = reach_counts(h)[1:] / total  # P(>= d), d = 1..len-1
                n_eff = min(total, _N_EFF_CAP)
                for d in range(min(len(tail), o.steps, self.S)):
                    p = reach[i, d]
                    sd = np.sqrt(max(p * (1 - p), 1e-4) / n_eff + 1e-4)
                    out.append((tail[d] - p) / sd)
        out.extend((theta - PRIOR_MEAN) / PRIOR_SD)
        return np.asarray(out)

    def fit(self, obs: Sequence[AcceptObs], *, iterations: int = 25) -> None:
        """MAP fit by damped Gauss-Newton from the last solution; updates mean and covariance."""
        obs = [o for o in obs if o.accept_length is not None or o.histogram]
        self.n_obs = len(obs)
        theta = self.theta.copy()
        if not obs:
            self.theta, self.cov = PRIOR_MEAN.copy(), np.diag(PRIOR_SD ** 2)
            return
        damping = 1e-2
        r = self._residuals(theta, obs)
        cost = float(r @ r)
        J = self._jacobian(theta, obs, r)
        for _ in range(iterations):
            H = J.T @ J
            step = np.linalg.solve(H + damping * np.diag(np.diag(H) + 1e-9), -J.T @ r)
            trial = theta + step
            r_new = self._residuals(trial, obs)
            cost_new = float(r_new @ r_new)
            if cost_new < cost:
                theta, r = trial, r_new
                improvement = cost - cost_new
                cost = cost_new
                damping = max(damping / 3, 1e-6)
                J = self._jacobian(theta, obs, r)
                if improvement < 1e-6 * (1 + cost):
                    break
            else:
                damping *= 4
                if damping > 1e6:
                    break
        self.theta = theta
        self.cov = np.linalg.inv(J.T @ J + 1e-9 * np.eye(len(theta)))

    def _jacobian(self, theta: np.ndarray, obs: Sequence[AcceptObs], r: np.ndarray) -> np.ndarray:
        J = np.empty((len(r), len(theta)))
        for j in range(len(theta)):
            step = np.zeros_like(theta)
            step[j] = 1e-4
            J[:, j] = (self._residuals(theta + step, obs) - r) / 1e-4
        return J
