"""GRPO on Catch-bsuite (episodes of 9 steps, limit 1000): budget used, final return, and env steps/s
against PPO on the same env and budget, both in this one process (issue 11, item 3).

Every run is composed as the CLI composes it (conf/ defaults + conf/tuned/<algo>_<env>.yaml) and
trained through ``runner.execute``: ``algo=<a> env=Catch-bsuite total_timesteps=200000
num_seeds=8``. Env steps/s are summary.json's (all seeds together, compile excluded; GRPO counts
real episode steps only). Writes ``experiments/results/bench_grpo_catch.{json,md}``.

    python experiments/bench_grpo_catch.py                 # seeds 0..7 (the issue's command)
    python experiments/bench_grpo_catch.py --seed 100      # held-out seeds 100..107 (validation)
    python experiments/bench_grpo_catch.py --env CartPole-v1 --total-timesteps 2000000 --seeds 4 \
        --algos grpo                                       # a floor (-> bench_grpo_CartPole-v1.*)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
from purejaxrl_opt.host.xla_flags import set_default_xla_flags  # noqa: E402  (before JAX starts)

set_default_xla_flags()

from compare_grpo_ppo import compose  # noqa: E402

KEYS = ("final_return_mean", "final_return_std", "final_return_per_seed", "env_steps",
        "env_steps_per_seed", "num_updates", "max_updates", "env_steps_per_second",
        "compile_seconds", "run_seconds", "total_timesteps")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="Catch-bsuite")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--total-timesteps", type=int, default=200_000)
    parser.add_argument("--algos", nargs="+", default=["grpo", "ppo"])
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--set", nargs="*", default=[], help="extra CLI overrides, e.g. algo.lr=3e-4")
    args = parser.parse_args()

    import jax

    from purejaxrl_opt.host import runner

    results = {}
    for algo in args.algos:
        run = compose([f"algo={algo}", f"env={args.env}", f"seed={args.seed}",
                       f"num_seeds={args.seeds}", f"total_timesteps={args.total_timesteps}",
                       "logger=none", *args.set])
        with tempfile.TemporaryDirectory() as tmp:
            result = runner.execute(run, tmp, loggers=[])
        results[algo] = {k: result.summary[k] for k in KEYS}
        print(f"[catch] {algo}: final {result.summary['final_return_mean']:.3f}, env steps "
              f"{result.summary['env_steps']:,} of {args.total_timesteps:,}, "
              f"{result.summary['env_steps_per_second']:,.0f} steps/s", flush=True)
    report = {"env": args.env, "seeds": list(range(args.seed, args.seed + args.seeds)),
              "total_timesteps": args.total_timesteps, "device": runner.describe_device(),
              "jax_version": jax.__version__, "date": time.strftime("%Y-%m-%d %H:%M"),
              "results": results}
    if "grpo" in results and "ppo" in results:
        report["grpo_over_ppo_steps_per_second"] = round(
            results["grpo"]["env_steps_per_second"] / results["ppo"]["env_steps_per_second"], 3)
    args.out.mkdir(parents=True, exist_ok=True)
    base = "bench_grpo_catch" if args.env == "Catch-bsuite" else f"bench_grpo_{args.env}"
    stem = args.out / (base + (f"_seed{args.seed}" if args.seed else ""))
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"# {args.env}, {args.total_timesteps:,} env steps, seeds {report['seeds'][0]}.."
             f"{report['seeds'][-1]} ({report['device']}, {report['date']}, one process)", "",
             "| algo | final return (mean ± std) | env steps used (mean) | updates | env steps/s | compile s |",
             "|---|---|---|---|---|---|"]
    for algo, r in results.items():
        lines.append(f"| {algo} | {r['final_return_mean']:.3f} ± {r['final_return_std']:.3f} | "
                     f"{r['env_steps']:,} | {r['num_updates']} | {r['env_steps_per_second']:,.0f} | "
                     f"{r['compile_seconds']:.1f} |")
    if "grpo_over_ppo_steps_per_second" in report:
        lines += ["", f"GRPO / PPO env steps/s: {report['grpo_over_ppo_steps_per_second']:.2f}"]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
