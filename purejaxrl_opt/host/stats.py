"""Aggregate statistics over independent runs (seeds), as rliable computes them, in plain numpy.

Agarwal et al. (2021), "Deep RL at the Edge of the Statistical Precipice": report the interquartile
mean (IQM) with stratified bootstrap confidence intervals over runs instead of a mean +- std of a few
seeds, and compare algorithms by the probability of improvement. ``rliable`` itself would pull in
arch, statsmodels, patsy and formulaic for what is a few lines here; the definitions follow it:

* IQM = ``scipy.stats.trim_mean(x, 0.25)`` over all runs (and tasks): the mean of the middle half,
  ``int(0.25 n)`` values cut from each end;
* stratified bootstrap: runs are resampled with replacement *within* each task (a task keeps its
  number of runs), the statistic is recomputed on every resample, and the CI is the percentile
  interval of those values;
* probability of improvement of X over Y on a task: P(x > y) + P(x = y) / 2 for x, y drawn from
  the runs of X and Y (the Mann-Whitney U statistic over ``n_x n_y``), averaged over tasks; its CI
  resamples the runs of X and of Y independently within each task.

Score arrays are ``[runs]`` (one task) or ``[runs, tasks]``; the probability of improvement also takes
lists of per-task 1-D arrays with different numbers of runs. Every bootstrap takes a ``seed`` and is
deterministic given it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

Statistic = Callable[[np.ndarray], np.ndarray]


def _as_matrix(scores) -> np.ndarray:
    scores = np.asarray(scores, dtype=float)
    if scores.ndim == 1:
        scores = scores[:, None]
    if scores.ndim != 2 or scores.shape[0] < 1 or scores.shape[1] < 1:
        raise ValueError(f"scores must be [runs] or [runs, tasks] with at least one run, got shape "
                         f"{scores.shape}")
    if not np.all(np.isfinite(scores)):
        raise ValueError("scores must be finite (a NaN/inf run cannot be ranked)")
    return scores


def iqm(scores, axis=None) -> np.ndarray:
    """Interquartile mean: the mean of the values left after cutting ``int(0.25 n)`` of the lowest
    and of the highest (``scipy.stats.trim_mean(scores, 0.25, axis)``; ``axis=None`` pools all)."""
    scores = np.asarray(scores, dtype=float)
    if axis is None:
        scores, axis = scores.reshape(-1), 0
    n = scores.shape[axis]
    cut = int(0.25 * n)
    ordered = np.sort(scores, axis=axis)
    return np.take(ordered, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


def mean(scores, axis=None) -> np.ndarray:
    return np.mean(np.asarray(scores, dtype=float), axis=axis)


def median(scores, axis=None) -> np.ndarray:
    return np.median(np.asarray(scores, dtype=float), axis=axis)


STATISTICS: dict[str, Callable] = {"iqm": iqm, "mean": mean, "median": median}


def t_half_width(values, level: float = 0.95) -> float | None:
    """Half-width of the Student-t confidence interval of the mean of ``values`` (1-D):
    ``t_{(1+level)/2, n-1} * std(ddof=1) / sqrt(n)``. ``None`` for fewer than two values (one seed
    has no interval). At the few seeds RL runs use, the normal approximation's ``1.96`` is far too
    narrow (n = 4: t = 3.18; n = 2: t = 12.7)."""
    from scipy.stats import t as student_t

    array = np.asarray(values, dtype=float).reshape(-1)
    n = array.size
    if n < 2:
        return None
    return float(student_t.ppf((1.0 + level) / 2.0, n - 1) * array.std(ddof=1) / np.sqrt(n))


@dataclass(frozen=True)
class Interval:
    """A point estimate and its ``level`` percentile bootstrap confidence interval."""

    value: float
    low: float
    high: float
    level: float = 0.95

    def as_dict(self, prefix: str) -> dict:
        return {prefix: self.value, f"{prefix}_ci_low": self.low, f"{prefix}_ci_high": self.high}


def _resample_indices(rng: np.random.Generator, runs: int, tasks: int, reps: int) -> np.ndarray:
    """``[reps, runs, tasks]`` run indices drawn with replacement, independently per task."""
    return rng.integers(0, runs, size=(reps, runs, tasks))


def _percentiles(values: np.ndarray, level: float) -> tuple[float, float]:
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(values, [tail, 100.0 - tail])
    return float(low), float(high)


def stratified_bootstrap_ci(scores, statistic: str | Callable = "iqm", reps: int = 5000,
                            level: float = 0.95, seed: int = 0) -> Interval:
    """``statistic`` over all runs and tasks of ``scores`` ([runs] or [runs, tasks]) and its
    percentile CI from ``reps`` stratified bootstrap resamples (runs resampled within each task).

    ``statistic`` is a name from :data:`STATISTICS` or a function of a ``[..., runs, tasks]`` array
    that reduces the last two axes (called once, vectorised over the resamples).
    """
    if reps < 1:
        raise ValueError(f"reps = {reps!r}: must be >= 1")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level = {level!r}: must be in (0, 1)")
    scores = _as_matrix(scores)
    fn = _statistic(statistic)
    runs, tasks = scores.shape
    index = _resample_indices(np.random.default_rng(seed), runs, tasks, reps)
    resampled = np.take_along_axis(np.broadcast_to(scores, (reps, runs, tasks)), index, axis=1)
    values = fn(resampled)
    low, high = _percentiles(values, level)
    return Interval(float(fn(scores[None])[0]), low, high, level)


def _statistic(statistic: str | Callable) -> Callable:
    """A function of ``[B, runs, tasks]`` -> ``[B]``."""
    if callable(statistic):
        return statistic
    if statistic not in STATISTICS:
        raise ValueError(f"statistic {statistic!r}: must be one of {sorted(STATISTICS)} or a function")
    fn = STATISTICS[statistic]
    return lambda x: fn(x.reshape(x.shape[0], -1), axis=1)


def _tasks(scores) -> list[np.ndarray]:
    """Per-task 1-D arrays of runs from ``[runs]``, ``[runs, tasks]``, or a list of 1-D NumPy
    arrays (one per task; tasks may then have different numbers of runs)."""
    if isinstance(scores, (list, tuple)) and scores and all(
            isinstance(s, np.ndarray) and s.ndim == 1 for s in scores):
        return [_as_matrix(s)[:, 0] for s in scores]
    matrix = _as_matrix(scores)
    return [matrix[:, t] for t in range(matrix.shape[1])]


def _poi(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x`` [..., n_x], ``y`` [..., n_y] (one task) -> [...] probability that x beats y."""
    diff = x[..., :, None] - y[..., None, :]
    return (diff > 0).mean(axis=(-2, -1)) + 0.5 * (diff == 0).mean(axis=(-2, -1))


def probability_of_improvement(x, y) -> float:
    """P(X > Y): on each task, the fraction of pairs (run of X, run of Y) where X's score is higher,
    ties counting one half (Mann-Whitney U / (n_x n_y)); averaged over tasks. ``x`` and ``y`` are
    ``[runs]`` (one task), ``[runs, tasks]``, or lists of per-task 1-D NumPy arrays (tasks may
    then have different numbers of runs)."""
    xs, ys = _tasks(x), _tasks(y)
    if len(xs) != len(ys):
        raise ValueError(f"x has {len(xs)} tasks and y {len(ys)}: they must be the same tasks")
    return float(np.mean([_poi(a, b) for a, b in zip(xs, ys)]))


def probability_of_improvement_ci(x, y, reps: int = 5000, level: float = 0.95,
                                  seed: int = 0) -> Interval:
    """:func:`probability_of_improvement` with its percentile CI: the runs of X and of Y are
    resampled independently, each within every task (rliable's stratified independent bootstrap),
    and the per-task probabilities averaged resample by resample."""
    if reps < 1:
        raise ValueError(f"reps = {reps!r}: must be >= 1")
    xs, ys = _tasks(x), _tasks(y)
    if len(xs) != len(ys):
        raise ValueError(f"x has {len(xs)} tasks and y {len(ys)}: they must be the same tasks")
    rng = np.random.default_rng(seed)
    values = np.zeros(reps)
    for a, b in zip(xs, ys):
        ia = rng.integers(0, a.size, size=(reps, a.size))
        ib = rng.integers(0, b.size, size=(reps, b.size))
        chunk = max(1, int(4e6 // (a.size * b.size)))  # bounds the [chunk, n_x, n_y] array
        for start in range(0, reps, chunk):
            stop = min(reps, start + chunk)
            values[start:stop] += _poi(a[ia[start:stop]], b[ib[start:stop]])
    values /= len(xs)
    low, high = _percentiles(values, level)
    return Interval(probability_of_improvement(xs, ys), low, high, level)


def iqm_curve_ci(curves, reps: int = 1000, level: float = 0.95, seed: int = 0):
    """Per time point, the IQM over runs of ``curves`` ([runs, T]) and its bootstrap CI (the same run
    resample at every time point, so the band is that of whole learning curves).
    Returns ``(iqm, low, high)``, each ``[T]``."""
    curves = np.asarray(curves, dtype=float)
    if curves.ndim != 2:
        raise ValueError(f"curves must be [runs, T], got shape {curves.shape}")
    runs, steps = curves.shape
    index = np.random.default_rng(seed).integers(0, runs, size=(reps, runs))
    values = iqm(curves[index], axis=1)  # [reps, T]
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(values, [tail, 100.0 - tail], axis=0)
    return iqm(curves, axis=0), low, high


def late_training_return(returns, episodes=None, fraction: float = 0.1) -> float | None:
    """The training return late in a run: the mean return of the episodes that ended in the last
    ``fraction`` of its updates. ``returns`` is ``[updates]``, each update's mean return over the
    episodes that ended in it (NaN where none did); ``episodes`` (``[updates]``, optional) their
    counts, which weight the updates, so the result is the mean over those episodes. Without counts
    (a peer that logs only per-update means) every update with a finite return weighs the same. The
    last ``fraction`` is ``updates[int(n * (1 - fraction)):]`` (at least the last update). None where
    no episode ended in it."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction = {fraction!r}: must be in (0, 1]")
    values = np.asarray(returns, dtype=float).reshape(-1)
    weights = np.ones_like(values) if episodes is None else np.asarray(episodes, dtype=float).reshape(-1)
    if weights.shape != values.shape:
        raise ValueError(f"returns {values.shape} and episodes {weights.shape} must have one entry per update")
    start = min(int(values.size * (1.0 - fraction)), values.size - 1)
    tail, counts = values[start:], weights[start:]
    keep = np.isfinite(tail) & (counts > 0)
    if not keep.any():
        return None
    return float(np.sum(tail[keep] * counts[keep]) / np.sum(counts[keep]))
