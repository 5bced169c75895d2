"""A search on a real task, then the best suggestion vs the shipped default on held-out seeds.

1. Search (tuning seeds < 1000): ``python -m purejaxrl_opt.train -m hydra/sweeper=optuna`` over the
   default PPO space, ``--batch`` suggestions per compiled job, ``--rounds`` rounds, TPE (the first
   round is its random start-up), each trial ``--tune-seeds`` seeds from seed 0, the shipped budget.
2. Held out (report seeds from 3000, experiments/SEEDS.md): the best trial's values and the shipped
   config (no overrides), each a plain run of ``--report-seeds`` seeds, the same budget, the same
   seeds; IQM / mean with 95% bootstrap CIs over seeds, and P(best > default).

    nice -n 10 python experiments/search_task.py --env Acrobot-v1 --batch 8 --rounds 3

Each stage is skipped when its output exists (rerun to continue). Writes
``experiments/results/search_<env>/{search/optimization_results.yaml, heldout_*/summary.json,
results.json, results.md}``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

import provenance  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["logger=none", "progress.mode=lines", "progress.chunks=4", "checkpoint.final=false"]


def cli(args: list[str]) -> float:
    start = time.perf_counter()
    command = [sys.executable, "-m", "purejaxrl_opt.train", *args]
    print("+", " ".join(command), flush=True)
    proc = subprocess.run(command, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(command)}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Acrobot-v1")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tune-seeds", type=int, default=2)
    parser.add_argument("--report-seeds", type=int, default=8)
    parser.add_argument("--report-seed", type=int, default=3000)
    parser.add_argument("--sampler-seed", type=int, default=0)
    parser.add_argument("--sampler", default="tpe", help="hydra/sweeper/sampler: tpe | batched_tpe | ...")
    parser.add_argument("--out", default=None, help="under experiments/results/ (default search_<env>)")
    args = parser.parse_args()
    out = ROOT / "experiments" / "results" / (args.out or f"search_{args.env}")
    out.mkdir(parents=True, exist_ok=True)
    search_dir = out / "search"
    timings = {}
    search_args = ["-m", "hydra/sweeper=optuna", f"hydra/sweeper/sampler={args.sampler}",
                   f"env={args.env}", "algo=ppo",
                   f"hydra.sweeper.n_trials={args.batch * args.rounds}", f"sweep.batch={args.batch}",
                   f"hydra.sweeper.sampler.seed={args.sampler_seed}",
                   f"hydra.sweeper.sampler.n_startup_trials={args.batch}",
                   "seed=0", f"num_seeds={args.tune_seeds}", *QUIET, f"hydra.sweep.dir={search_dir}"]
    if not (search_dir / "optimization_results.yaml").exists() or yaml.safe_load(
            (search_dir / "optimization_results.yaml").read_text())["trials_done"] < args.batch * args.rounds:
        timings["search_seconds"] = round(cli(search_args), 1)
    found = yaml.safe_load((search_dir / "optimization_results.yaml").read_text())
    best = found["best_params"]
    heldout = ["seed=" + str(args.report_seed), f"num_seeds={args.report_seeds}", f"env={args.env}",
               "algo=ppo", *QUIET]
    runs = {"default": [], "best": [f"{k}={v!r}" for k, v in best.items()]}
    for name, overrides in runs.items():
        run_dir = out / f"heldout_{name}"
        if not (run_dir / "summary.json").exists():
            timings[f"heldout_{name}_seconds"] = round(cli(heldout + overrides + [f"hydra.run.dir={run_dir}"]), 1)

    from purejaxrl_opt.host import stats

    summaries = {name: json.loads((out / f"heldout_{name}" / "summary.json").read_text()) for name in runs}
    scores = {name: np.asarray(s["final_return_per_seed"]) for name, s in summaries.items()}
    table = {}
    for name, values in scores.items():
        iqm = stats.stratified_bootstrap_ci(values, "iqm")
        mean = stats.stratified_bootstrap_ci(values, "mean")
        table[name] = {"iqm": iqm.value, "iqm_ci": [iqm.low, iqm.high], "mean": mean.value,
                       "mean_ci": [mean.low, mean.high], "min": float(values.min()),
                       "per_seed": values.tolist(), "seeds": summaries[name]["seeds"],
                       "run_seconds": summaries[name]["run_seconds"],
                       "compile_seconds": summaries[name]["compile_seconds"]}
    poi = stats.probability_of_improvement_ci(scores["best"], scores["default"])
    trials = found["trials"]
    rounds = [max((t["value"] for t in trials[r * args.batch:(r + 1) * args.batch] if t["value"] is not None),
                  default=None) for r in range(args.rounds)]
    # the commit each stage ran at (the jobs' summaries), next to the commit writing this report
    job_commits = sorted({json.loads(p.read_text())["commit"] for p in search_dir.glob("*/summary.json")})
    report = {**provenance.stamp(), "search_job_commits": job_commits,
              "heldout_commits": sorted({s["commit"] for s in summaries.values()}),
              "env": args.env, "algo": "ppo",
              "total_timesteps": summaries["default"]["total_timesteps"],
              "search": {"trials": len(trials), "batch": args.batch, "jobs": found["jobs"],
                         "tune_seeds": list(range(args.tune_seeds)), "sampler": found["sampler"],
                         "objective": found["objective"], "best_trial": found["best_trial"],
                         "best_value": found["best_value"], "best_params": best,
                         "best_value_per_round": rounds,
                         "search_command": "python -m purejaxrl_opt.train " + " ".join(search_args)},
              "heldout": table, "p_best_beats_default": [poi.value, poi.low, poi.high], **timings}
    (out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    fmt = lambda e: f"{e['iqm']:.1f} [{e['iqm_ci'][0]:.1f}, {e['iqm_ci'][1]:.1f}]"  # noqa: E731
    fmtm = lambda e: f"{e['mean']:.1f} [{e['mean_ci'][0]:.1f}, {e['mean_ci'][1]:.1f}]"  # noqa: E731
    seeds = f"{args.report_seed}-{args.report_seed + args.report_seeds - 1}"
    tuning = ("tuning seed 0" if args.tune_seeds == 1
              else f"{args.tune_seeds} tuning seeds (0-{args.tune_seeds - 1})")
    lines = [f"# PPO {args.env}: searched config vs the shipped default", "",
             f"Search: {len(trials)} trials ({found['sampler']}, the first {args.batch} its random "
             f"start-up), {args.batch} per compiled job ({found['jobs']} jobs), each trial on {tuning} "
             f"at {report['total_timesteps']:,} env steps, objective: {found['objective']} final "
             f"return. Best of each round: {', '.join(f'{v:.1f}' for v in rounds if v is not None)}. "
             f"Best trial {found['best_trial']} ({found['best_value']:.1f} on the tuning seeds):", "",
             "| key | searched | shipped |", "|---|---:|---:|"]
    shipped = summaries["default"]["config"]["algo"]
    for key, value in best.items():
        lines.append(f"| {key} | {value:.4g} | {shipped[key.split('.', 1)[1]]:.4g} |")
    lines += ["", f"Held out: seeds {seeds} (never used for choosing), {report['total_timesteps']:,} "
              "env steps, final return of a seed = its final policy's mean return over its evaluation "
              "episodes; 95% percentile bootstrap CIs over seeds.", "",
              "| config | seeds | IQM [95% CI] | mean [95% CI] | worst seed |", "|---|---|---:|---:|---:|"]
    for name in ("best", "default"):
        lines.append(f"| {name} | {seeds} | {fmt(table[name])} | {fmtm(table[name])} | {table[name]['min']:.1f} |")
    lines += ["", f"P(best > default) = {poi.value:.3f} [{poi.low:.3f}, {poi.high:.3f}] (0.5 = no "
              "difference).", "", f"Search jobs ran at commit {', '.join(job_commits)}; held-out runs "
              f"at {', '.join(report['heldout_commits'])}.", provenance.markdown_footer()]
    (out / "results.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
