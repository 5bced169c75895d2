"""experiments/bench_throughput.py runs end to end on a tiny shape the way docs/results.md's command runs
it (every measurement of one shape, PPO through the CLI's runner too) and writes its JSON with the commit
and the command: the script had crashed unseen once, when the rollout started calling methods its
acting-only distribution wrapper lacked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # a benchmark script of experiments/, not a user path: ~25 s of compiles
def test_tiny_run_measures_every_rate_and_writes_provenance(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "experiments/bench_throughput.py", "--shapes", "4x2", "--algos", "ppo", "--cli",
         "--repeats", "1", "--num-steps", "16", "--env-steps", "128", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["commit"] and "bench_throughput.py" in record["command"]
    (res,) = record["results"]
    assert (res["num_envs"], res["lanes"], res["num_steps"]) == (4, 2, 16)
    for name in ("random", "acting", "acting_unused", "acting_with_critic", "ppo", "ppo_cli"):
        assert res[f"{name}_steps_per_s"] > 0, name
    assert res["ppo_over_acting"] == res["ppo_steps_per_s"] / res["acting_steps_per_s"]
    assert record["matmul_flops_per_s"] > 0
