"""The CLI's compile time against another checkout of the project, interleaved (A B A B ...).

    git worktree add /tmp/before <commit>
    python experiments/bench_compile.py --baseline /tmp/before --rounds 4 \
        --out experiments/results/bench_compile/concurrent.json

Each round runs ``python -m purejaxrl_opt.train`` once per side and case, each in its own process
from that checkout (``PYTHONPATH`` and the working directory set to it, so its package is the one
imported), and reads ``compile_seconds`` from the run's ``summary.json``: the wall time from
tracing the run's first program to the last one compiled (init, the chunked updates, the final
evaluation). Cases (``--cases``): ``one_seed`` (PPO CartPole, 1 seed: one device), ``four_seeds``
(the main job's 4 seeds: lane blocks over the host devices, the sharded path). Both run 51,200 env
steps with ``logger=none``: the training itself is not what is measured.

Writes ``--out`` (JSON: every measurement, per side and case the mean and the ratio of the means,
this checkout's commit and the baseline's, the command, the load average before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import provenance

ROOT = Path(__file__).resolve().parents[1]
CASES = {"one_seed": ["num_seeds=1"], "four_seeds": ["num_seeds=4"]}
COMMON = ["algo=ppo", "env=CartPole-v1", "total_timesteps=51200", "logger=none"]


def compile_seconds(checkout: Path, overrides: list[str], run_dir: Path) -> float:
    """One CLI run from ``checkout``: its summary.json's ``compile_seconds``."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    cmd = [sys.executable, "-m", "purejaxrl_opt.train", *COMMON, *overrides, f"hydra.run.dir={run_dir}"]
    done = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} (in {checkout}) failed:\n{done.stderr[-2000:]}")
    return json.loads((run_dir / "summary.json").read_text())["compile_seconds"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="another checkout of the project (e.g. a git worktree)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--out", default=str(ROOT / "experiments/results/bench_compile/bench_compile.json"))
    args = parser.parse_args(argv)
    baseline = Path(args.baseline).resolve()
    if not (baseline / "purejaxrl_opt" / "train.py").is_file():
        parser.error(f"--baseline: {baseline} is not a checkout of the project (no purejaxrl_opt/train.py)")
    sides = {"baseline": baseline, "this": ROOT}
    load_before = provenance.load_average()
    seconds = {case: {side: [] for side in sides} for case in args.cases}
    with tempfile.TemporaryDirectory(prefix="bench_compile_") as tmp:
        for r in range(args.rounds):
            for case in args.cases:
                for side, checkout in sides.items():
                    s = compile_seconds(checkout, CASES[case], Path(tmp) / f"{case}_{side}_{r}")
                    seconds[case][side].append(s)
                    print(f"round {r} {case:10s} {side:8s} compile {s:.2f} s", flush=True)
    results = {}
    for case, per_side in seconds.items():
        means = {side: statistics.mean(v) for side, v in per_side.items()}
        results[case] = {"overrides": COMMON + CASES[case], "seconds": per_side,
                         "mean_s": {k: round(v, 3) for k, v in means.items()},
                         "this_over_baseline": round(means["this"] / means["baseline"], 3)}
        print(f"{case}: this {means['this']:.2f} s / baseline {means['baseline']:.2f} s = "
              f"{results[case]['this_over_baseline']:.2f}x")
    provenance.write_json(args.out, {"baseline_commit": provenance.checkout_commit(baseline, short=12), "rounds": args.rounds,
                                     "load_avg_before": load_before, "load_avg_after": provenance.load_average(),
                                     "machine": provenance.machine(), "results": results})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
