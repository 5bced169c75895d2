"""PPO on MiniGrid-style envs (Navix, XLand-MiniGrid) through the training CLI: success rates over seeds, variants side by
side, against the random policy measured the same way.

    # DoorKey-8x8 (full symbolic grid), the tuned file conf/tuned/ppo_navix/Navix-DoorKey-8x8-v0.yaml
    python experiments/learn_navix.py --env navix/Navix-DoorKey-8x8-v0 --seeds 3000 --num-seeds 4 \
        --out experiments/results/navix_doorkey8x8 --variant ppo_mlp
    # the partially observable DoorKey-5x5 (agent-centred 7x7 view): MLP vs GRU, same budget
    python experiments/learn_navix.py --env navix/Navix-DoorKey-5x5-v0 --seeds 3000 --num-seeds 4 \
        --steps 500000 --out experiments/results/navix_memory \
        --common env.params.observation=symbolic_first_person \
        --variant mlp network.recurrent=none --variant gru network.recurrent=gru
    # XLand-MiniGrid's MemoryS8 (remember the object shown at the start), the tuned GRU file
    # conf/tuned/ppo_xminigrid/MiniGrid-MemoryS8.yaml vs the same file feed-forward, same budget
    python experiments/learn_navix.py --env xminigrid/MiniGrid-MemoryS8 --seeds 3238 --num-seeds 4 \
        --out experiments/results/xminigrid_memory_s8_view5_12M --random-episodes 256 --variant gru \
        --variant mlp network.recurrent=none 'network.head_sizes=[]'

Each ``--variant NAME [OVERRIDES...]`` is one ``python -m purejaxrl_opt.train algo=ppo env=ENV
seed=S num_seeds=N [total_timesteps=T] COMMON OVERRIDES`` process (seeds vmapped). Navix's reward is
1 on reaching the goal and 0 otherwise, so a return is a success rate (XLand-MiniGrid's is
``1 - 0.9 * steps / limit`` on success, 0 otherwise: a return > 0.5 needs success on most episodes): the final deterministic
evaluation's ``final_return_per_seed`` is each seed's success rate over ``eval_episodes`` episodes.
Also reported: each seed's training return (sampled actions) over the last 10% of its updates, env
steps/s and compile seconds. The random policy (uniform over the env's actions) is measured through
``evaluation.play_episodes`` as the final evaluation is (experiments/random_return_nj.py).
Writes ``<out>/results.json`` and ``<out>/results.md``.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

import provenance  # noqa: E402

from purejaxrl_opt.host import stats  # noqa: E402


RETURN_MEANING = {
    "navix": "Success = the final policy's return (navix: 1 on reaching the goal, else 0)",
    "xminigrid": "Return of the final policy (XLand-MiniGrid: 1 - 0.9 * steps / limit on success, else 0)",
}


def late_training_return(metrics_csv: Path, fraction: float = 0.1) -> dict[int, float | None]:
    """Per seed: the mean training return (sampled actions, episodes finished in each rollout) over the
    last ``fraction`` of its updates. (Not "the first update above a threshold": with a long episode
    limit the first rollouts finish only the episodes that reached the goal early, so their mean
    return is 1 before anything is learnt.)"""
    per_seed: dict[int, list[float]] = {}
    for row in csv.DictReader(metrics_csv.open()):
        value = row.get("return_mean", "")
        per_seed.setdefault(int(row["seed"]), []).append(float(value) if value not in ("", "nan") else np.nan)
    out = {}
    for seed, values in per_seed.items():
        tail = np.asarray(values[-max(1, int(len(values) * fraction)):])
        out[seed] = float(np.nanmean(tail)) if np.isfinite(tail).any() else None
    return out


def iqm_ci(values) -> dict:
    """IQM over seeds with its 95% stratified bootstrap CI."""
    return stats.stratified_bootstrap_ci(np.asarray(values, float), "iqm", reps=5000, seed=0).as_dict("iqm")


def run_variant(args, name: str, overrides: list[str], out: Path) -> dict:
    run_dir = out / name
    command = [sys.executable, "-m", "purejaxrl_opt.train", "algo=ppo", f"env={args.env}", f"seed={args.seeds}",
               f"num_seeds={args.num_seeds}", "progress.mode=lines", "checkpoint.final=false", "logger=console",
               f"hydra.run.dir={run_dir}", *([f"total_timesteps={args.steps}"] if args.steps else []),
               *args.common, *overrides]
    if args.reuse and (run_dir / "summary.json").is_file() and (run_dir / "timing.json").is_file():
        timing = json.loads((run_dir / "timing.json").read_text())  # a finished run of this command
    else:
        timing = {"load_before": provenance.load_average()}
        start = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True, cwd=str(ROOT))
        timing.update(wall_s=round(time.perf_counter() - start, 1), load_after=provenance.load_average())
        (out / f"{name}.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise SystemExit(f"{name} failed (rc {proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}")
        (run_dir / "timing.json").write_text(json.dumps(timing))
    summary = json.loads((run_dir / "summary.json").read_text())
    success = summary["final_return_per_seed"]
    late = {str(k): v for k, v in late_training_return(run_dir / "metrics.csv").items()}
    learnt = [x for x in late.values() if x is not None]
    return {
        "name": name, "command": "python -m purejaxrl_opt.train " + " ".join(command[3:]),
        **timing, "success_per_seed": success, "seeds": summary["seeds"],
        "iqm": iqm_ci(success),
        "env_steps_per_seed": summary["env_steps_per_seed"], "compile_s": summary["compile_seconds"],
        "run_s": summary["run_seconds"], "env_steps_per_s": summary["env_steps_per_second"],
        "eval_episodes": summary["eval_episodes"],
        "eval_deterministic": bool(summary["config"].get("eval_deterministic", True)),
        "training_return_last_10pct": late,
        # the training return averages thousands of episodes a seed where the final evaluation has eval_episodes
        "training_iqm": iqm_ci(learnt) if learnt else None,
        "network": summary["config"]["network"], "algo": summary["config"]["algo"],
        "env_config": summary["config"]["env"],
    }


def random_policy(env_id: str, params: dict, episodes: int) -> dict:
    from random_return_nj import random_returns

    returns, spec = random_returns(env_id, params, episodes, 0, use_mask=False)
    return {"episodes": episodes, "num_actions": spec.num_actions, "mean": float(returns.mean()),
            "se": float(returns.std() / np.sqrt(returns.size))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="navix/Navix-DoorKey-8x8-v0")
    parser.add_argument("--seeds", type=int, default=3000, help="first seed")
    parser.add_argument("--num-seeds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=None, help="env steps per seed (default: the tuned file's)")
    parser.add_argument("--common", nargs="*", default=[], help="overrides for every variant")
    parser.add_argument("--variant", nargs="+", action="append", required=True, metavar="NAME [OVERRIDE]")
    parser.add_argument("--reuse", action="store_true", help="read back variants this script finished before")
    parser.add_argument("--random-episodes", type=int, default=1024)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    variants = [run_variant(args, v[0], v[1:], out) for v in args.variant]
    import yaml  # the values as Hydra reads them (true -> bool, 3 -> int)

    params = {k.split("env.params.", 1)[1]: yaml.safe_load(v) for k, v in (o.split("=", 1) for o in args.common)
              if k.lstrip("+").startswith("env.params.")}
    rand = random_policy(args.env, params, args.random_episodes)
    record = {**provenance.stamp(), "env": args.env, "env_params": params, "variants": variants,
              "random_policy": rand}
    (out / "results.json").write_text(json.dumps(record, indent=1) + "\n")

    lines = [f"# PPO on {args.env}{' ' + str(params) if params else ''}: success rate over seeds", "",
             RETURN_MEANING.get(args.env.split("/")[0], "Final return") + ", mean over its evaluation "
             "episodes; IQM over seeds with a 95% stratified bootstrap CI.", "",
             "| variant | seeds | env steps/seed | final return per seed (deterministic or sampled: the "
             "variant's eval_deterministic) | IQM [95% CI] | training return, "
             "last 10% of updates (sampled actions, per seed; IQM [95% CI]) | env steps/s | compile s |",
             "|---|---|---|---|---|---|---|---|"]
    for v in variants:
        iv = v["iqm"]
        reach = ", ".join("-" if x is None else f"{x:.2f}" for x in v["training_return_last_10pct"].values())
        if v["training_iqm"] is not None:
            ti = v["training_iqm"]
            reach += f"; IQM {ti['iqm']:.2f} [{ti['iqm_ci_low']:.2f}, {ti['iqm_ci_high']:.2f}]"
        mode = "deterministic" if v["eval_deterministic"] else "sampled"
        lines.append(f"| {v['name']} | {v['seeds'][0]}-{v['seeds'][-1]} | {v['env_steps_per_seed'][0]:,} | "
                     f"{', '.join(f'{x:.2f}' for x in v['success_per_seed'])} ({mode}, {v['eval_episodes']} "
                     f"episodes each) | {iv['iqm']:.2f} "
                     f"[{iv['iqm_ci_low']:.2f}, {iv['iqm_ci_high']:.2f}] | {reach} | {v['env_steps_per_s']:,.0f} | "
                     f"{v['compile_s']:.0f} |")
    lines += ["", f"Random policy (uniform over the {rand['num_actions']} actions, {rand['episodes']} episodes, "
              f"`evaluation.play_episodes`): {rand['mean']:.3f} ± {rand['se']:.3f} (s.e.).", ""]
    for v in variants:
        lines += [f"{v['name']}: `{v['command']}` (load average {v['load_before']} -> {v['load_after']})", ""]
    (out / "results.md").write_text("\n".join(lines) + provenance.markdown_footer())
    print("\n".join(lines))


if __name__ == "__main__":
    main()
