"""experiments/learn_navix.py: the training return it reports per seed is the mean over the last 10% of
that seed's updates (NaN rollouts, with no finished episode, skipped), and the IQM [CI] over seeds it adds
is the project's stratified bootstrap of exactly those per-seed values (read back from a finished run)."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))


def _write_metrics(path: Path, returns: dict[int, list[float]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seed", "update", "env_steps", "return_mean"])
        for seed, values in returns.items():
            for update, value in enumerate(values):
                writer.writerow([seed, update, 4096 * (update + 1), "nan" if np.isnan(value) else value])


def test_late_training_return_is_the_mean_of_the_last_tenth_skipping_empty_rollouts(tmp_path):
    import learn_navix

    # 20 updates a seed: the last 10% is the last 2 updates
    a = [0.1] * 18 + [0.5, 0.9]
    b = [0.2] * 18 + [np.nan, 0.4]
    c = [0.3] * 18 + [np.nan, np.nan]
    _write_metrics(tmp_path / "metrics.csv", {7: a, 8: b, 9: c})
    late = learn_navix.late_training_return(tmp_path / "metrics.csv")
    assert late[7] == pytest.approx(0.7)
    assert late[8] == pytest.approx(0.4)
    assert late[9] is None


def test_a_finished_run_is_read_back_with_the_training_return_iqm_over_seeds(tmp_path):
    import learn_navix
    from purejaxrl_opt.host import stats

    run_dir = tmp_path / "gru"
    run_dir.mkdir()
    finals = [0.9, 0.5, 0.7, 0.8]
    lates = [0.97, 0.49, 0.78, 0.96]
    _write_metrics(run_dir / "metrics.csv", {s: [0.0] * 9 + [v] for s, v in zip(range(10, 14), lates)})
    (run_dir / "summary.json").write_text(json.dumps({
        "final_return_per_seed": finals, "seeds": [10, 11, 12, 13], "env_steps_per_seed": [40960] * 4,
        "compile_seconds": 1.0, "run_seconds": 2.0, "env_steps_per_second": 3.0, "eval_episodes": 16,
        "config": {"eval_deterministic": True, "network": {}, "algo": {}, "env": {}}}))
    (run_dir / "timing.json").write_text(json.dumps({"load_before": "0", "wall_s": 1.0, "load_after": "0"}))
    args = argparse.Namespace(env="xminigrid/MiniGrid-MemoryS8", seeds=10, num_seeds=4, steps=None, common=[],
                              reuse=True)
    record = learn_navix.run_variant(args, "gru", [], tmp_path)
    assert list(record["training_return_last_10pct"].values()) == pytest.approx(lates)
    expected = stats.stratified_bootstrap_ci(np.asarray(lates), "iqm", reps=5000, seed=0)
    assert record["training_iqm"]["iqm"] == pytest.approx(np.mean(sorted(lates)[1:3]))
    assert (record["training_iqm"]["iqm_ci_low"], record["training_iqm"]["iqm_ci_high"]) == pytest.approx(
        (expected.low, expected.high))
    assert record["iqm"]["iqm"] == pytest.approx(np.mean(sorted(finals)[1:3]))
