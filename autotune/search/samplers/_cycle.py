"""The phase model's cycle time: part 2 of :mod:`autotune.search.samplers._fit`.

:class:`CycleModel` fits the speculative cycle relative to the group's decode step as a function
of steps ``s``, top-k ``k`` and draft tokens ``N``: per phase (draft, verify, re-extend, other)
when the device timer splits the cycle, else the whole cycle; the verify curve's saturation rate
is averaged over a grid of rates weighted by fit. Kept apart from the rest of the fit because it
is self-contained (features, priors, Bayesian linear fits) and is tested on its own.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autotune.search.samplers import _blr

# Saturation rates of the verify curve: a MoE target's experts saturate within a few tokens
# per request at high concurrency, or over tens of tokens at batch 1.
_C_GRID = tuple(float(c) for c in np.geomspace(0.03, 6.0, 14))
# Priors of the cycle parts, in units of the group's decode step (broad: MoE and dense alike).
_DRAFT_PRIOR = (np.array([0.02, 0.04, 0.005]), np.array([0.05, 0.05, 0.02]))
# Verifying one token per request is a decode step plus the verify extras: the intercept is ~1.
_VERIFY_PRIOR = (np.array([1.05, 0.0, 0.02, 0.0]), np.array([0.08, 1.0, 0.1, 0.02]))
_EXTEND_PRIOR = (np.array([0.05, 0.005]), np.array([0.05, 0.02]))
_OTHER_PRIOR = (np.array([0.02]), np.array([0.05]))
_TOTAL_PRIOR = (np.concatenate([[1.14], [0.045, 0.005], [0.0, 0.02, 0.0]]),
                np.concatenate([[0.1], [0.07, 0.03], [1.0, 0.1, 0.02]]))


def _verify_features(N: np.ndarray, k: np.ndarray, c: float) -> np.ndarray:
    return np.stack([np.ones_like(N, dtype=float), 1 - np.exp(-c * (N - 1)), N - 1.0,
                     N * (k > 1)], axis=1)


def _total_features(s: np.ndarray, k: np.ndarray, N: np.ndarray, c: float) -> np.ndarray:
    v = _verify_features(N, k, c)
    return np.concatenate([np.ones((len(s), 1)), np.stack([s, s * (k - 1.0)], axis=1), v[:, 1:]],
                          axis=1)


_Averaged = list  # [(weight, saturation rate c, posterior)]: a fit averaged over c


class CycleModel:
    """Normalised cycle time (cycle_ms / decode_step_ms) as a function of (s, k, N)."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, _blr.Posterior | _Averaged]] = []

    def fit(self, s: np.ndarray, k: np.ndarray, N: np.ndarray, phases: np.ndarray,
            split: bool) -> None:
        """Fit from normalised phases.

        Args:
            s, k, N: Steps, top-k and draft tokens of each trial.
            phases: (n, 4) draft, verify, extend, other when ``split``, else (n, 1) cycle.
            split: Whether the device timer split the cycle into phases.
        """
        s, k, N = s.astype(float), k.astype(float), N.astype(float)
        self.parts = []
        if not split:
            self.parts.append(("cycle", _average_over_c(
                lambda c: _total_features(s, k, N, c), phases[:, 0], _TOTAL_PRIOR,
                np.array([0, 1, 1, 1, 1, 1], bool))))
            return
        for col, name in enumerate(("draft", "verify", "extend", "other")):
            y = phases[:, col]
            if name == "verify":
                self.parts.append((name, _average_over_c(
                    lambda c: _verify_features(N, k, c), y, _VERIFY_PRIOR,
                    np.array([0, 1, 1, 1], bool))))
                continue
            prior = {"draft": _DRAFT_PRIOR, "extend": _EXTEND_PRIOR, "other": _OTHER_PRIOR}[name]
            self.parts.append((name, _blr.fit(_simple_features(name, s, k), y, _phase_sd(y),
                                              prior_mean=prior[0], prior_sd=prior[1],
                                              nonneg=np.ones(len(prior[0]), bool)
                                              if name != "other" else None)))

    def predict(self, s: np.ndarray, k: np.ndarray, N: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Normalised cycle mean and variance at each (s, k, N)."""
        s, k, N = s.astype(float), k.astype(float), N.astype(float)
        mu = np.zeros(len(s))
        var = np.zeros(len(s))
        for name, post in self.parts:
            if isinstance(post, list):
                # Model average over the saturation rate: its spread is part of the variance.
                ms, vs, ws = [], [], []
                for w, c, p in post:
                    X = _verify_features(N, k, c) if name == "verify" else \
                        _total_features(s, k, N, c)
                    m, v = p.predict(X)
                    ms.append(m)
                    vs.append(v)
                    ws.append(w)
                ms_a, vs_a, ws_a = np.array(ms), np.array(vs), np.array(ws)[:, None]
                m = (ws_a * ms_a).sum(axis=0)
                v = (ws_a * (vs_a + ms_a ** 2)).sum(axis=0) - m ** 2
            else:
                m, v = post.predict(_simple_features(name, s, k))
            mu += m
            var += np.maximum(v, 0.0)
        return np.maximum(mu, 1e-3), var


def _phase_sd(y: np.ndarray) -> np.ndarray:
    return 0.02 * np.abs(y) + 0.002


def _simple_features(name: str, s: np.ndarray, k: np.ndarray) -> np.ndarray:
    ones = np.ones_like(s, dtype=float)
    if name == "draft":
        return np.stack([ones, s, s * (k - 1)], axis=1)
    if name == "extend":
        return np.stack([ones, s + 1], axis=1)
    return ones[:, None]


def _average_over_c(features: Callable[[float], np.ndarray], y: np.ndarray, prior: tuple[np.ndarray, np.ndarray],
                    nonneg: np.ndarray) -> _Averaged:
    """Fits for every saturation rate, weighted by how well each explains the data."""
    fits = []
    for c in _C_GRID:
        post = _blr.fit(features(c), y, _phase_sd(y), prior_mean=prior[0], prior_sd=prior[1],
                        nonneg=nonneg)
        score = post.sse + float(np.sum(((post.mean - prior[0]) / prior[1]) ** 2))
        fits.append((c, post, score))
    best = min(f[2] for f in fits)
    weights = np.array([np.exp(-0.5 * (f[2] - best)) for f in fits])
    weights /= weights.sum()
    return [(float(w), c, post) for w, (c, post, _) in zip(weights, fits, strict=True) if w > 1e-4]
