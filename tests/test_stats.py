"""IQM, stratified bootstrap CIs and probability of improvement against hand computations, scipy,
and the coverage of a known distribution."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from purejaxrl_opt.host import stats


def test_iqm_by_hand():
    # n=8: cut int(0.25*8)=2 from each end -> mean of the middle four 3, 4, 5, 6 (outliers ignored)
    assert stats.iqm([-1000, 2, 3, 4, 5, 6, 7, 1e9]) == pytest.approx(4.5)
    # n=5: cut 1 from each end -> mean of 2, 3, 10
    assert stats.iqm([1, 2, 3, 10, 50]) == pytest.approx(5.0)
    # n=3: int(0.75)=0 cut -> plain mean
    assert stats.iqm([1, 2, 6]) == pytest.approx(3.0)
    x = np.random.default_rng(0).normal(size=(16, 5))
    assert stats.iqm(x) == pytest.approx(sps.trim_mean(x, 0.25, axis=None))
    np.testing.assert_allclose(stats.iqm(x, axis=0), sps.trim_mean(x, 0.25, axis=0))


def test_probability_of_improvement_by_hand_and_against_mann_whitney():
    # pairs (x, y): 3>1, 3>2, 3=3 (1/2), 2>1, 2=2 (1/2), 2<3 -> (1+1+.5+1+.5+0)/6 = 4/6
    assert stats.probability_of_improvement([3, 2], [1, 2, 3]) == pytest.approx(4 / 6)
    assert stats.probability_of_improvement([5, 6], [1, 2]) == 1.0
    assert stats.probability_of_improvement([1, 2], [5, 6]) == 0.0
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 5, size=13).astype(float), rng.integers(0, 5, size=9).astype(float)
    u = sps.mannwhitneyu(x, y, alternative="two-sided").statistic
    assert stats.probability_of_improvement(x, y) == pytest.approx(u / (x.size * y.size))
    # symmetric: P(X>Y) + P(Y>X) = 1 (ties split)
    assert stats.probability_of_improvement(x, y) + stats.probability_of_improvement(y, x) == \
        pytest.approx(1.0)
    # two tasks: the average of the per-task probabilities
    two = stats.probability_of_improvement(np.array([[3, 5], [2, 6]]), np.array([[1, 9], [2, 9], [3, 9]]))
    assert two == pytest.approx((4 / 6 + 0.0) / 2)


def test_bootstrap_ci_of_a_constant_is_the_constant_and_is_deterministic():
    ci = stats.stratified_bootstrap_ci(np.full(16, 500.0), "iqm", reps=200)
    assert (ci.value, ci.low, ci.high) == (500.0, 500.0, 500.0)
    x = np.random.default_rng(2).normal(size=16)
    assert stats.stratified_bootstrap_ci(x, "mean", seed=3) == stats.stratified_bootstrap_ci(x, "mean", seed=3)


def test_bootstrap_is_stratified_by_task():
    # task 0 runs are all 0, task 1 runs all 10: a resample that mixed tasks would move the mean;
    # stratified, every resample keeps 4 runs of each task, so the mean is exactly 5
    scores = np.stack([np.zeros(4), np.full(4, 10.0)], axis=1)
    ci = stats.stratified_bootstrap_ci(scores, "mean", reps=500)
    assert (ci.value, ci.low, ci.high) == (5.0, 5.0, 5.0)


def test_bootstrap_ci_matches_scipy_percentile_bootstrap():
    x = np.random.default_rng(4).normal(10.0, 2.0, size=16)
    ours = stats.stratified_bootstrap_ci(x, "median", reps=20000, seed=0)
    ref = sps.bootstrap((x,), np.median, n_resamples=20000, method="percentile",
                        random_state=np.random.default_rng(0)).confidence_interval
    assert ours.low == pytest.approx(ref.low, abs=0.15)
    assert ours.high == pytest.approx(ref.high, abs=0.15)


def test_bootstrap_ci_covers_the_true_mean_about_95_percent_of_the_time():
    """400 samples of 16 from N(0, 1): the percentile bootstrap CI of the mean covers 0 in about
    95% of them (percentile intervals undercover slightly at n=16, ~92-93%). With 400 trials the
    binomial std of the coverage is ~1.3%, so [0.88, 0.98] fails only on a real error."""
    rng = np.random.default_rng(5)
    hits = 0
    for trial in range(400):
        ci = stats.stratified_bootstrap_ci(rng.normal(size=16), "mean", reps=1000, seed=trial)
        hits += ci.low <= 0.0 <= ci.high
    assert 0.88 <= hits / 400 <= 0.98, hits / 400


def test_poi_ci_contains_point_and_separates_clear_cases():
    rng = np.random.default_rng(6)
    x, y = rng.normal(1.0, 1.0, size=16), rng.normal(0.0, 1.0, size=16)
    ci = stats.probability_of_improvement_ci(x, y, reps=2000)
    assert ci.low <= ci.value <= ci.high
    assert 0.5 < ci.value
    far = stats.probability_of_improvement_ci(x + 100.0, y, reps=500)
    assert (far.value, far.low, far.high) == (1.0, 1.0, 1.0)


def test_iqm_curve_ci_shapes_and_band():
    curves = np.random.default_rng(7).normal(size=(16, 30)) + np.arange(30)
    mid, low, high = stats.iqm_curve_ci(curves, reps=300)
    assert mid.shape == low.shape == high.shape == (30,)
    np.testing.assert_allclose(mid, sps.trim_mean(curves, 0.25, axis=0))
    assert np.all(low <= mid + 1e-12) and np.all(mid <= high + 1e-12)


@pytest.mark.parametrize("bad", [np.array([1.0, np.nan]), np.zeros((0,)), np.zeros((2, 2, 2))])
def test_bad_scores_are_refused(bad):
    with pytest.raises(ValueError):
        stats.stratified_bootstrap_ci(bad)


def test_unknown_statistic_is_refused():
    with pytest.raises(ValueError, match="iqm"):
        stats.stratified_bootstrap_ci([1.0, 2.0], "trimmed")


def test_probability_of_improvement_over_tasks_with_different_run_counts():
    x = [np.array([3.0, 2.0]), np.array([1.0, 1.0, 1.0])]
    y = [np.array([1.0, 2.0, 3.0]), np.array([0.0, 2.0])]
    # task 0: 4/6 (by hand above); task 1: each 1 beats 0 and loses to 2 -> 1/2
    assert stats.probability_of_improvement(x, y) == pytest.approx((4 / 6 + 0.5) / 2)
    ci = stats.probability_of_improvement_ci(x, y, reps=1000, seed=1)
    assert ci.value == pytest.approx((4 / 6 + 0.5) / 2)
    assert 0.0 <= ci.low <= ci.value <= ci.high <= 1.0
    # the same tasks as a matrix give the same numbers when the run counts agree
    m = np.array([[3.0, 1.0], [2.0, 1.0]])
    n = np.array([[1.0, 0.0], [2.0, 2.0]])
    assert stats.probability_of_improvement(m, n) == stats.probability_of_improvement(
        [m[:, 0], m[:, 1]], [n[:, 0], n[:, 1]])
    with pytest.raises(ValueError, match="same tasks"):
        stats.probability_of_improvement(x, y[:1])


def test_student_t_half_width_against_hand_computation():
    # [1, 2, 3, 4]: std (ddof 1) = sqrt(5/3); t_{0.975, 3} = 3.182446305284263 (tables)
    expected = 3.182446305284263 * np.sqrt(5.0 / 3.0) / 2.0
    np.testing.assert_allclose(stats.t_half_width([1.0, 2.0, 3.0, 4.0]), expected, rtol=1e-9)
    # two seeds: t_{0.975, 1} = 12.706204736174698, 6.5x the normal approximation's 1.96
    np.testing.assert_allclose(stats.t_half_width([0.0, 2.0]), 12.706204736174698 * np.sqrt(2.0) / np.sqrt(2.0),
                               rtol=1e-9)
    assert stats.t_half_width([5.0]) is None  # one seed: no interval
    # 90% level: t_{0.95, 3} = 2.353363434801823
    np.testing.assert_allclose(stats.t_half_width([1.0, 2.0, 3.0, 4.0], 0.90),
                               2.353363434801823 * np.sqrt(5.0 / 3.0) / 2.0, rtol=1e-9)
