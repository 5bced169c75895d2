"""A search's cost: K trials as ONE batched job (sweep.batch=K) vs K separate jobs (sweep.batch=1).

Both run the real CLI (``python -m purejaxrl_opt.train -m hydra/sweeper=optuna ...``, the basic
launcher: jobs one after another in one process, so JAX starts once either way) with a seeded random
sampler, which suggests the same K configs whether or not they are batched; the two are run
alternately ``--repeats`` times. Per search: the process's wall seconds, the compiles (one per job),
the jobs' compile and training seconds (summary.json), and per trial the objective both ways.

    nice -n 10 python experiments/search_bench.py --trials 8 --total-timesteps 20000

Writes ``experiments/results/search_bench/search_bench.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

import provenance  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "results" / "search_bench"


def search(out: Path, batch: int, args) -> dict:
    command = [sys.executable, "-m", "purejaxrl_opt.train", "-m", "hydra/sweeper=optuna",
               "hydra/sweeper/sampler=random", f"hydra.sweeper.sampler.seed={args.sampler_seed}",
               f"hydra.sweeper.n_trials={args.trials}", f"sweep.batch={batch}", f"env={args.env}",
               "algo=ppo", f"num_seeds={args.seeds}", f"total_timesteps={args.total_timesteps}",
               "logger=none", "progress.mode=off", "checkpoint.final=false", f"hydra.sweep.dir={out}"]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-4000:])
    found = yaml.safe_load((out / "optimization_results.yaml").read_text())
    summaries = [json.loads(p.read_text()) for p in sorted(out.glob("*/summary.json"))]
    return {"batch": batch, "wall_seconds": round(wall, 2), "compiles": found["jobs"],
            "compile_seconds": round(sum(s["compile_seconds"] for s in summaries), 2),
            "train_seconds": round(sum(s["run_seconds"] for s in summaries), 2),
            "values": [t["value"] for t in found["trials"]],
            "params": [t["params"] for t in found["trials"]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--total-timesteps", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--sampler-seed", type=int, default=0)
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for batch in (1, args.trials):  # alternately, on a shared machine
                load = provenance.load_average()[0]
                result = search(Path(tmp) / f"r{repeat}_b{batch}", batch, args)
                result.update(repeat=repeat, load_average_before=round(load, 2))
                runs.append(result)
                print(json.dumps({k: v for k, v in result.items() if k != "params"}), flush=True)
    separate = [r for r in runs if r["batch"] == 1]
    batched = [r for r in runs if r["batch"] == args.trials]
    same_params = all(r["params"] == separate[0]["params"] for r in runs)
    max_diff = max(abs(a - b) for s, b_run in zip(separate, batched)
                   for a, b in zip(s["values"], b_run["values"]))

    def median(rows, key):
        values = sorted(r[key] for r in rows)
        return values[len(values) // 2]

    report = {
        **provenance.stamp(), "trials": args.trials, "env": args.env, "seeds_per_trial": args.seeds,
        "total_timesteps": args.total_timesteps, "repeats": args.repeats,
        "same_suggestions_both_ways": same_params, "max_abs_value_difference": max_diff,
        "wall_ratio_separate_over_batched": round(median(separate, "wall_seconds")
                                                  / median(batched, "wall_seconds"), 2),
        "compile_ratio_separate_over_batched": round(median(separate, "compile_seconds")
                                                     / median(batched, "compile_seconds"), 2),
        "load_average_after": round(provenance.load_average()[0], 2), "runs": runs,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "search_bench.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"# Search cost: {args.trials} trials batched (sweep.batch={args.trials}) vs separate jobs",
             "", f"PPO {args.env}, {args.seeds} seeds per trial, {args.total_timesteps} env steps per "
             f"seed, random sampler (seed {args.sampler_seed}): the same {args.trials} suggestions both "
             f"ways ({same_params}); largest difference of a trial's objective between the two: "
             f"{max_diff:.3g}. Shared 2-core machine: the load average is noted per run.", "",
             "| run | sweep.batch | compiles | compile s (sum) | train s (sum) | wall s (process) | load avg |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        lines.append(f"| {r['repeat']} | {r['batch']} | {r['compiles']} | {r['compile_seconds']} | "
                     f"{r['train_seconds']} | {r['wall_seconds']} | {r['load_average_before']} |")
    lines += ["", f"Separate / batched (medians): wall x{report['wall_ratio_separate_over_batched']}, "
              f"compile seconds x{report['compile_ratio_separate_over_batched']}.",
              provenance.markdown_footer()]
    (OUT / "search_bench.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
