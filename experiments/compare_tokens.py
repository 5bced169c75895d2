"""GRPO against PPO-with-a-critic on token generation (Addition-v0, 2-digit operands, or any token env
with ``--env``), from one SFT start.

    python experiments/compare_tokens.py                    # everything (about 1 h on 2 CPU cores)
    python experiments/compare_tokens.py --env Multiply-v0 --out outputs/multiply   # results/compare_multiply-v0.*
    python experiments/compare_tokens.py --only grpo ppo    # some methods; finished runs are reused

Steps (each a CLI run into ``--out``; a run whose ``summary.json`` exists is reused unless ``--force``):

1. ``python -m purejaxrl_opt.sft`` on ``--sft-examples`` training prompts: the warm start, whose
   held-out greedy accuracy is reported (the floor asks for <= 60%).
2. From it, with ``--seeds`` seeds each and the same env-step budget (``conf/tuned/*_Addition-v0.yaml``):
   ``grpo`` (beta 0.04), ``grpo_beta0`` (no reference KL), ``dr_grpo`` (Dr. GRPO: no std scaling,
   constant loss normalisation), ``ppo`` (separate value transformer, GAE; conf/tuned/ppo_Addition-v0.yaml).
3. Table (Markdown + JSON) and a PNG of held-out greedy accuracy against env steps and against
   wall-clock seconds: final greedy/sampled accuracy (mean and per seed), seconds until the seed-mean
   accuracy first reached 0.9, the final KL to the reference (k3, mean of the last 10% of updates),
   parameter count, memory (XLA's accounting of the compiled chunk of updates, periodic evaluation
   included: arguments + outputs + temporaries; and the process's max RSS), env steps/s.
   Figures from runs on a shared machine: compare them within one invocation.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

import provenance

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"

METHODS = {
    "grpo": ("algo=grpo", []),
    "grpo_beta0": ("algo=grpo", ["algo.beta=0.0"]),
    "dr_grpo": ("algo=grpo", ["algo.scale_rewards=none", "algo.loss_norm=constant"]),
    # GSPO as TRL documents its reproduction of the paper: sequence-level ratio, no KL, the paper's
    # clip range (a length-normalised sequence ratio stays far closer to 1 than a token's)
    "gspo": ("algo=grpo", ["algo.importance_sampling_level=sequence", "algo.beta=0.0",
                           "algo.epsilon=3e-4", "algo.epsilon_high=4e-4"]),
    # DAPO-style: token-level reduction, clip-higher, no KL, dynamic sampling (2x oversampled groups,
    # train on those with spread), truncated answers masked
    "dapo": ("algo=grpo", ["algo.loss_type=dapo", "algo.epsilon_high=0.28", "algo.beta=0.0",
                           "algo.dynamic_sampling_oversample=2", "algo.mask_truncated_completions=true"]),
    "ppo": ("algo=ppo", []),
}


def ensure_sft(args) -> Path:
    out = args.out / "sft"
    if args.force or not (out / "summary.json").is_file():
        provenance.run_logged([sys.executable, "-m", "purejaxrl_opt.sft", f"env={args.env}", f"seed={args.seed}",
             f"sft.num_examples={args.sft_examples}", f"sft.steps={args.sft_steps}",
             f"hydra.run.dir={out}", *args.sft_extra], args.out / "sft.log")
    return out


def ensure_method(args, name: str, sft_dir: Path) -> Path:
    out = args.out / name
    if args.force or not (out / "summary.json").is_file():
        algo, extra = METHODS[name]
        cmd = [sys.executable, "-m", "purejaxrl_opt.train", algo, f"env={args.env}", f"seed={args.seed}",
               f"num_seeds={args.seeds}", f"init_from={sft_dir}", "checkpoint.final=false", "logger=none",
               f"hydra.run.dir={out}", *extra, *args.extra,
               *(args.ppo_extra if algo == "algo=ppo" else [])]
        if args.total_timesteps:
            cmd.append(f"total_timesteps={args.total_timesteps}")
        provenance.run_logged(cmd, args.out / f"{name}.log")
    return out


def curves(run_dir: Path, summary: dict):
    """Seed-mean eval accuracy at each evaluated update: (env_steps, seconds, mean, min, max)."""
    rows = [r for r in csv.DictReader((run_dir / "metrics.csv").open())
            if r.get("eval_accuracy") not in (None, "", "nan")]
    by_update: dict[int, list] = {}
    for r in rows:
        by_update.setdefault(int(r["update"]), []).append((float(r["env_steps"]), float(r["eval_accuracy"])))
    updates = sorted(by_update)
    steps = np.array([np.mean([s for s, _ in by_update[u]]) for u in updates])
    acc = [np.array([a for _, a in by_update[u]]) for u in updates]
    # updates run at a constant rate: wall-clock of update u ~ run_seconds * (u + 1) / num_updates
    seconds = np.array([summary["run_seconds"] * (u + 1) / summary["num_updates"] for u in updates])
    return steps, seconds, np.array([a.mean() for a in acc]), np.array([a.min() for a in acc]), \
        np.array([a.max() for a in acc])


def update_bytes(memory: dict):
    """XLA's arguments + outputs + temporaries of the compiled update (runs from before the field
    existed recorded XLA's peak_memory_in_bytes, arguments + outputs to within a few KB, as
    ``update_peak_bytes`` and the temporaries separately)."""
    if "update_total_bytes" in memory:
        return memory["update_total_bytes"]
    if "update_peak_bytes" in memory:
        return memory["update_peak_bytes"] + memory.get("update_temp_bytes", 0)
    return None


def last_fraction_mean(run_dir: Path, column: str, fraction: float = 0.1) -> float:
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    num_updates = max(int(r["update"]) for r in rows) + 1
    values = [float(r[column]) for r in rows if int(r["update"]) >= (1 - fraction) * num_updates
              and r.get(column) not in (None, "", "nan")]
    return float(np.mean(values)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "tokens")
    parser.add_argument("--env", default="Addition-v0")
    parser.add_argument("--sft-extra", nargs="*", default=[], help="more overrides for the SFT run")
    parser.add_argument("--only", nargs="*", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sft-examples", type=int, default=600)
    parser.add_argument("--sft-steps", type=int, default=1000)
    parser.add_argument("--total-timesteps", type=int, default=0, help="0 = the tuned configs' budget")
    parser.add_argument("--extra", nargs="*", default=[], help="more overrides for every RL run")
    parser.add_argument("--ppo-extra", nargs="*", default=[], help="more overrides for the PPO run "
                        "(e.g. algo.num_steps=<answer limit> for a task with longer answers)")
    parser.add_argument("--force", action="store_true", help="rerun finished runs")
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--stem", default="", help="results file name (default: compare_tokens for "
                        "Addition-v0, else compare_<env>)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    sft_dir = ensure_sft(args)
    sft_summary = json.loads((sft_dir / "summary.json").read_text())
    results, plotted = {}, {}
    for name in args.only:
        run_dir = ensure_method(args, name, sft_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
        steps, seconds, mean, low, high = curves(run_dir, summary)
        reached = np.nonzero(mean >= args.target)[0]
        results[name] = {
            "eval_accuracy": summary["eval_accuracy"],
            "eval_accuracy_per_seed": summary["eval_accuracy_per_seed"],
            "eval_accuracy_sampled": summary["eval_accuracy_sampled"],
            "eval_pass@8": summary.get("eval_pass@8"),
            "eval_pass@8_per_seed": summary.get("eval_pass@8_per_seed"),
            "eval_pass@1": summary.get("eval_pass@1"),
            f"seconds_to_{args.target}": float(seconds[reached[0]]) if reached.size else None,
            f"env_steps_to_{args.target}": float(steps[reached[0]]) if reached.size else None,
            "kl_ref_final": last_fraction_mean(run_dir, "kl_ref"),
            "num_params": summary["num_params"],
            "update_total_bytes": update_bytes(summary.get("memory", {})),
            "process_max_rss_bytes": summary.get("memory", {}).get("process_max_rss_bytes"),
            "env_steps_per_second": summary["env_steps_per_second"],
            "run_seconds": summary["run_seconds"],
            "compile_seconds": summary["compile_seconds"],
            "env_steps_per_seed": summary["env_steps"],
            "num_seeds": summary["num_seeds"],
            "config": {k: summary["config"]["algo"].get(k) for k in
                       ("num_groups", "group_size", "num_envs", "beta", "scale_rewards", "loss_norm",
                        "loss_type", "importance_sampling_level", "epsilon", "epsilon_high",
                        "dynamic_sampling_oversample", "mask_truncated_completions",
                        "lr", "update_epochs", "num_minibatches") if k in summary["config"]["algo"]},
            "run_dir": str(run_dir),
        }
        plotted[name] = (steps, seconds, mean, low, high)

    table = {"sft": {"eval_accuracy": sft_summary["eval_accuracy"],
                     "train_accuracy": sft_summary["train_accuracy"],
                     "examples": sft_summary["examples"], "run_dir": str(sft_dir)},
             "methods": results, "target": args.target,
             "command": " ".join(["python", "experiments/" + Path(sys.argv[0]).name] + sys.argv[1:]),
             "commit": provenance.commit()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = args.stem or ("compare_tokens" if args.env == "Addition-v0" else f"compare_{args.env.lower()}")
    (RESULTS / f"{stem}.json").write_text(json.dumps(table, indent=2))

    def mb(x):
        return f"{x / 2**20:.0f}" if x else "n/a"

    lines = [f"commit: {table['commit']}", f"command: `{table['command']}`", "",
             f"SFT start: held-out greedy accuracy {sft_summary['eval_accuracy']:.3f} "
             f"({sft_summary['examples']} examples; training-prompt accuracy "
             f"{sft_summary['train_accuracy']:.3f})", "",
             f"| method | greedy acc (mean; per seed) | gain over SFT | sampled acc | s to {args.target} | "
             "KL to ref (k3, last 10%) | params | chunk MiB (XLA) | max RSS MiB | env steps/s | run s | pass@8 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        to_target = r[f"seconds_to_{args.target}"]
        lines.append(
            f"| {name} | {r['eval_accuracy']:.3f} ({', '.join(f'{a:.3f}' for a in r['eval_accuracy_per_seed'])}) "
            f"| {r['eval_accuracy'] - sft_summary['eval_accuracy']:+.3f} | {r['eval_accuracy_sampled']:.3f} "
            f"| {'not reached' if to_target is None else f'{to_target:.0f}'} "
            f"| {r['kl_ref_final']:.3f} | {r['num_params']:,} | {mb(r['update_total_bytes'])} "
            f"| {mb(r['process_max_rss_bytes'])} | {r['env_steps_per_second']:,.0f} | {r['run_seconds']:.0f} "
            f"| {'n/a' if r['eval_pass@8'] is None else format(r['eval_pass@8'], '.3f')} |")
    lines += ["", "chunk MiB: XLA's accounting (arguments + outputs + temporaries) of the compiled chunk of "
              "updates, all seeds, with the periodic held-out evaluation inside it (with `eval_every`, its "
              "generation dominates); the update alone at two model sizes: `experiments/memory_tokens.py`."]
    text = "\n".join(lines) + "\n"
    (RESULTS / f"{stem}.md").write_text(text)
    print(text)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, (steps, seconds, mean, low, high) in plotted.items():
        for ax, x in zip(axes, (steps, seconds)):
            (line,) = ax.plot(x, mean, label=name)
            ax.fill_between(x, low, high, alpha=0.2, color=line.get_color())
    for ax, label in zip(axes, ("env steps per seed", "run seconds (all seeds, one process)")):
        ax.axhline(sft_summary["eval_accuracy"], color="grey", ls=":", label="SFT start")
        ax.axhline(args.target, color="black", ls="--", lw=0.8)
        ax.set_xlabel(label)
        ax.set_ylabel("held-out greedy accuracy")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"{args.env}: mean and range over {args.seeds} seeds")
    fig.tight_layout()
    fig.savefig(RESULTS / f"{stem}.png", dpi=120)
    print(f"wrote {RESULTS / (stem + '.json')}, .md, .png")


if __name__ == "__main__":
    main()
