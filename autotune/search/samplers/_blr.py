"""Bayesian linear regression with a Gaussian prior: the small solver every fit here uses.

Each fit is a handful of coefficients learned from a handful of trials, so the prior carries as
much weight as the data early on; the posterior covariance gives the predictive spread the
sampler turns into an exploration bonus.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Posterior:
    """Posterior of ``y = X @ w + noise`` with ``w ~ N(prior_mean, diag(prior_sd**2))``.

    Attributes:
        mean: Posterior mean of the coefficients.
        cov: Posterior covariance of the coefficients.
        sse: Weighted sum of squared residuals of the data at the posterior mean.
        n: Number of data points fitted.
    """

    mean: np.ndarray
    cov: np.ndarray
    sse: float
    n: int

    def predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance (of the mean function, noise excluded) at the rows of ``X``."""
        X = np.atleast_2d(X)
        mu = X @ self.mean
        var = np.einsum("ij,jk,ik->i", X, self.cov, X)
        return mu, np.maximum(var, 0.0)


def fit(X: np.ndarray, y: np.ndarray, sd: np.ndarray | float, *, prior_mean: np.ndarray,
        prior_sd: np.ndarray, nonneg: np.ndarray | None = None) -> Posterior:
    """Fit the posterior of ``y ~ X w`` with per-point noise ``sd``.

    Args:
        X: Design matrix, shape (n, p); n may be 0 (the prior is returned).
        y: Targets, shape (n,).
        sd: Noise standard deviation, scalar or per point.
        prior_mean: Prior mean of ``w``, shape (p,).
        prior_sd: Prior standard deviation of ``w``, shape (p,); must be > 0.
        nonneg: Optional mask of coefficients that physics says are >= 0. Those whose posterior
            mean comes out negative are pinned at 0 (and the rest refitted), so a curve that must
            rise with load never bends down.

    Returns:
        The posterior.
    """
    X = np.asarray(X, dtype=float).reshape(-1, len(prior_mean))
    y = np.asarray(y, dtype=float).reshape(-1)
    prior_mean = np.asarray(prior_mean, dtype=float)
    prior_sd = np.asarray(prior_sd, dtype=float)
    if np.any(prior_sd <= 0):
        raise ValueError("prior_sd must be > 0")
    w = np.broadcast_to(1.0 / np.square(np.asarray(sd, dtype=float)), y.shape)
    free = np.ones(len(prior_mean), dtype=bool)
    for _ in range(len(prior_mean) + 1):
        post = _solve(X, y, w, prior_mean, prior_sd, free)
        if nonneg is None:
            return post
        bad = free & np.asarray(nonneg, dtype=bool) & (post.mean < 0)
        if not bad.any():
            return post
        free &= ~bad
    return post


def _solve(X: np.ndarray, y: np.ndarray, w: np.ndarray, m0: np.ndarray, s0: np.ndarray,
           free: np.ndarray) -> Posterior:
    p = len(m0)
    mean = np.zeros(p)
    cov = np.zeros((p, p))
    Xf = X[:, free]
    prec = (Xf.T * w) @ Xf + np.diag(1.0 / np.square(s0[free]))
    rhs = (Xf.T * w) @ y + m0[free] / np.square(s0[free])
    cov_f = np.linalg.inv(prec)
    mean[free] = cov_f @ rhs
    idx = np.flatnonzero(free)
    cov[np.ix_(idx, idx)] = cov_f
    resid = y - X @ mean
    return Posterior(mean=mean, cov=cov, sse=float(np.sum(w * resid * resid)), n=len(y))
