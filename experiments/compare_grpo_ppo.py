"""PPO vs GRPO (same-start groups) vs GRPO (unrelated episodes grouped) on CartPole-v1 and Acrobot-v1.

Every run is composed exactly as the CLI composes it (conf/ defaults + conf/tuned/<algo>_<env>.yaml),
with the same env-step budget for all three, and trained through ``runner.execute``. Writes to
``experiments/results/``:

* ``compare_grpo_ppo.png`` — training return (mean over seeds, band = +-1 std) against env steps;
  GRPO's x axis counts only real (unmasked) episode steps, like its ``env_steps``;
* ``compare_grpo_ppo.csv`` / ``.md`` — final deterministic-evaluation return mean +- std over seeds,
  env steps used, env steps/s (all seeds together, compile excluded), compile seconds, parameters.

    python experiments/compare_grpo_ppo.py            # floor budgets (CartPole 2M, Acrobot 1M), 4 seeds
    python experiments/compare_grpo_ppo.py --full     # the same with 8 seeds, as the floors are measured
    python experiments/compare_grpo_ppo.py --quick    # half the budgets, 2 seeds (a smoke run)

Measured on 2 shared CPU cores: --full took 7.5-10.5 min (load-dependent); the default about half.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import tempfile
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
from purejaxrl_opt.host.xla_flags import set_default_xla_flags  # noqa: E402  (before JAX starts)

set_default_xla_flags()
VARIANTS = {  # label -> CLI overrides
    "PPO": ["algo=ppo"],
    "GRPO same-start": ["algo=grpo", "algo.grouping=same_start"],
    "GRPO unrelated": ["algo=grpo", "algo.grouping=unrelated"],
}
BUDGET = {"CartPole-v1": 2_000_000, "Acrobot-v1": 1_000_000}  # the floors' budgets
THRESHOLD = {"CartPole-v1": 400.0, "Acrobot-v1": -150.0}  # training return for "steps to threshold"


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose, initialize_config_dir

    from purejaxrl_opt.config.schema import from_dictconfig

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return from_dictconfig(hydra_compose(config_name="config", overrides=overrides))


def curve(metrics: dict, grid: np.ndarray) -> np.ndarray:
    """Per seed, training return interpolated onto ``grid`` env steps: ``[seeds, len(grid)]``."""
    steps, returns = np.asarray(metrics["env_steps"]), np.asarray(metrics["return_mean"])
    rows = []
    for lane_steps, lane_returns in zip(steps, returns):
        ok = np.isfinite(lane_returns)
        row = np.interp(grid, lane_steps[ok], lane_returns[ok])
        row[grid > lane_steps[ok].max()] = np.nan  # no extrapolation past what was measured
        rows.append(row)
    return np.asarray(rows)


def steps_to_threshold(metrics: dict, threshold: float) -> tuple[float, int]:
    """Mean over the seeds that got there of the first env step count at which the training return
    reached ``threshold``, and how many seeds got there."""
    steps, returns = np.asarray(metrics["env_steps"]), np.asarray(metrics["return_mean"])
    firsts = [lane_steps[np.argmax(hit)] for lane_steps, hit in
              zip(steps, np.nan_to_num(returns, nan=-np.inf) >= threshold) if hit.any()]
    return (float(np.mean(firsts)) if firsts else math.nan), len(firsts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="8 seeds (default 4)")
    parser.add_argument("--quick", action="store_true", help="half the budgets, 2 seeds")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per run (overrides the above)")
    parser.add_argument("--envs", nargs="+", default=list(BUDGET))
    parser.add_argument("--total-timesteps", type=int, default=None, help="one budget for every env")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args()
    seeds = args.seeds or (8 if args.full else 2 if args.quick else 4)
    budgets = {k: v // 2 for k, v in BUDGET.items()} if args.quick else BUDGET

    from purejaxrl_opt.host import runner

    args.out.mkdir(parents=True, exist_ok=True)
    rows, curves = [], {}
    for env_id in args.envs:
        budget = args.total_timesteps or budgets.get(env_id, 1_000_000)
        grid = np.linspace(0, budget, 101)
        for label, overrides in VARIANTS.items():
            run = compose(overrides + [f"env={env_id}", "seed=0", f"num_seeds={seeds}",
                                       f"total_timesteps={budget}", "logger=none"])
            print(f"[compare] {label} on {env_id}: {seeds} seeds x {budget:,} steps", flush=True)
            with tempfile.TemporaryDirectory() as tmp:
                result = runner.execute(run, tmp, loggers=[])
            s = result.summary
            metrics = jax_to_np(result.loop.metrics)
            curves[(env_id, label)] = (grid, curve(metrics, grid))
            threshold = THRESHOLD.get(env_id, math.inf)
            to_threshold, reached = steps_to_threshold(metrics, threshold)
            rows.append({"env": env_id, "algo": label, "seeds": seeds, "budget": budget,
                         "final_return_mean": round(s["final_return_mean"], 2),
                         "final_return_std": round(s["final_return_std"], 2),
                         "env_steps_used": s["env_steps"], "num_updates": s["num_updates"],
                         "env_steps_per_second": round(s["env_steps_per_second"]),
                         "compile_seconds": s["compile_seconds"], "num_params": s["num_params"],
                         "threshold": threshold, "steps_to_threshold": round(to_threshold) if reached else math.nan,
                         "seeds_reaching_threshold": reached})
            print(f"[compare]   final {s['final_return_mean']:.1f} +- {s['final_return_std']:.1f}, "
                  f"{s['env_steps_per_second']:,.0f} steps/s", flush=True)

    write_table(rows, args.out / "compare_grpo_ppo")
    plot(curves, args.envs, args.out / "compare_grpo_ppo.png")
    print(f"[compare] wrote {args.out}/compare_grpo_ppo.{{png,csv,md}}")


def jax_to_np(tree: dict) -> dict:
    return {k: np.asarray(v) for k, v in tree.items()}


def write_table(rows: list[dict], stem: Path) -> None:
    with open(stem.with_suffix(".csv"), "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| env | algo | seeds | budget | final return (mean ± std) | steps to training return "
             ">= threshold (seeds) | env steps used | updates | env steps/s | compile s | params |",
             "|" + "---|" * 11]
    for r in rows:
        lines.append(f"| {r['env']} | {r['algo']} | {r['seeds']} | {r['budget']:,} | "
                     f"{r['final_return_mean']:.1f} ± {r['final_return_std']:.1f} | "
                     f"{_steps(r['steps_to_threshold'])} for {r['threshold']:g} "
                     f"({r['seeds_reaching_threshold']}/{r['seeds']}) | {r['env_steps_used']:,} | {r['num_updates']} | {r['env_steps_per_second']:,} | "
                     f"{r['compile_seconds']:.1f} | {r['num_params']:,} |")
    lines += ["", "Final return: deterministic evaluation of each seed's final policy "
              "(eval_episodes episodes), mean ± std over seeds. Env steps/s: all seeds together, "
              "compile excluded; GRPO counts only real episode steps although each update steps every "
              "env to the episode limit (masked padding), and by default charges every update as if "
              "all its episodes ran to the limit, so it can use less than the budget. Steps to "
              "threshold: mean over the seeds that got there of the env steps at which the training "
              "(sampling) return first reached the threshold.", ""]
    for env_id in dict.fromkeys(r["env"] for r in rows):
        by_algo = {r["algo"]: r for r in rows if r["env"] == env_id}
        ppo, grpo = by_algo.get("PPO"), by_algo.get("GRPO same-start")
        if ppo and grpo and ppo["steps_to_threshold"] > 0 and grpo["steps_to_threshold"] > 0:
            lines.append(f"- {env_id}: GRPO (same-start) needs "
                         f"{grpo['steps_to_threshold'] / ppo['steps_to_threshold']:.1f}x PPO's env "
                         f"steps to reach a training return of {grpo['threshold']:g}; final "
                         f"deterministic returns {grpo['final_return_mean']:.1f} (GRPO) vs "
                         f"{ppo['final_return_mean']:.1f} (PPO).")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")


def _steps(x: float) -> str:
    return "never" if not math.isfinite(x) else f"{x:,.0f}"


def plot(curves: dict, env_ids: list[str], path: Path) -> None:
    fig, axes = plt.subplots(1, len(env_ids), figsize=(6 * len(env_ids), 4.2), squeeze=False)
    for ax, env_id in zip(axes[0], env_ids):
        for label in VARIANTS:
            grid, per_seed = curves[(env_id, label)]
            with warnings.catch_warnings():  # all-NaN columns past the shortest seed's steps
                warnings.simplefilter("ignore", RuntimeWarning)
                mean, std = np.nanmean(per_seed, 0), np.nanstd(per_seed, 0)
            line, = ax.plot(grid, mean, label=label)
            ax.fill_between(grid, mean - std, mean + std, color=line.get_color(), alpha=0.2)
        ax.set_title(env_id)
        ax.set_xlabel("env steps (per seed)")
        ax.set_ylabel("training episode return")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
