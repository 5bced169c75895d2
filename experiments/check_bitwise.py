"""Before/after check for refactors: short CLI runs of every algorithm must give bitwise the same numbers.

    python experiments/check_bitwise.py record DIR      # write the reference runs into DIR
    python experiments/check_bitwise.py check DIR       # rerun into a temp dir and compare with DIR
    python experiments/check_bitwise.py check DIR --only ppo_cartpole,trpo_cartpole

Compares every run's ``summary.json`` (minus timings, device/host, memory and the process RSS, which are
not results) and ``metrics.csv`` byte for byte, and the evaluate CLI's JSON for the PPO run (minus its
run dir). Exit status 1 and the differing keys/lines on any difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# (name, train.py overrides): small budgets, every algorithm, discrete + continuous + token envs,
# periodic evaluation and an in-compile sweep, a MinAtar env and one env of every library
RUNS = {
    "ppo_cartpole": ["algo=ppo", "env=CartPole-v1", "total_timesteps=4096", "num_seeds=2", "eval_every=2",
                     "eval_episodes=4", "sweep.vmap={algo.lr: [2.5e-4, 1e-3]}"],
    "trpo_cartpole": ["algo=trpo", "env=CartPole-v1", "total_timesteps=4096", "num_seeds=2", "eval_every=2",
                      "eval_episodes=4"],
    "trpo_pendulum": ["algo=trpo", "env=Pendulum-v1", "total_timesteps=4096", "num_seeds=2",
                      "eval_episodes=2", "algo.num_envs=8", "algo.num_steps=64"],
    "grpo_cartpole": ["algo=grpo", "env=CartPole-v1", "total_timesteps=8192", "num_seeds=2", "eval_every=2",
                      "eval_episodes=4", "algo.num_groups=2", "algo.group_size=4"],
    "ppo_addition": ["algo=ppo", "env=Addition-v0", "total_timesteps=512", "num_seeds=2", "eval_every=2",
                     "eval_episodes=16", "algo.num_envs=32", "algo.num_steps=4", "algo.num_minibatches=2",
                     "network.d_model=32", "network.num_layers=1"],
    "grpo_addition": ["algo=grpo", "env=Addition-v0", "total_timesteps=512", "num_seeds=2", "eval_every=2",
                      "eval_episodes=16", "algo.num_groups=4", "algo.group_size=4", "algo.num_minibatches=2",
                      "network.d_model=32", "network.num_layers=1"],
    # a MinAtar env (the conv torso of its tuned file) and one env of each library
    "ppo_breakout": ["algo=ppo", "env=Breakout-MinAtar", "total_timesteps=2048", "num_seeds=1",
                     "algo.num_envs=8", "algo.num_steps=32", "eval_episodes=2"],
    "trpo_navix": ["algo=trpo", "env=navix/Navix-Empty-5x5-v0", "total_timesteps=1280", "num_seeds=1",
                   "algo.num_steps=32", "eval_episodes=2"],
    "grpo_xminigrid": ["algo=grpo", "env=xminigrid/MiniGrid-Empty-5x5", "total_timesteps=4000", "num_seeds=1",
                       "algo.num_groups=2", "algo.group_size=4", "algo.num_minibatches=2", "algo.update_epochs=1",
                       "eval_episodes=2"],
    "ppo_jumanji": ["algo=ppo", "env=jumanji/Snake-v1", "total_timesteps=1280", "num_seeds=1", "algo.num_envs=8",
                    "algo.num_steps=16", "eval_episodes=2"],
    "ppo_craftax": ["algo=ppo", "env=craftax/Craftax-Classic-Symbolic-v1", "total_timesteps=640", "num_seeds=1",
                    "algo.num_envs=8", "algo.num_steps=16", "algo.num_minibatches=2", "eval_episodes=2"],
    "ppo_playground": ["algo=ppo", "env=playground/CartpoleBalance", "total_timesteps=1280", "num_seeds=1",
                       "algo.num_envs=8", "algo.num_steps=32", "algo.num_minibatches=4", "algo.update_epochs=2",
                       "eval_episodes=2", "+env.params.episode_length=100"],
}
NOT_RESULTS = {"commit", "compile_seconds", "run_seconds", "env_steps_per_second", "device", "host", "memory",
               "jax_version"}
ROOT = Path(__file__).resolve().parents[1]


def run_all(out: Path, only: list[str]) -> None:
    for name in only:
        run_dir = out / name
        command = [sys.executable, "-m", "purejaxrl_opt.train", *RUNS[name], "logger=none",
                   "checkpoint.final=true", f"hydra.run.dir={run_dir}"]
        print(f"[check_bitwise] {name}", flush=True)
        subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        if name == "ppo_cartpole":
            subprocess.run([sys.executable, "-m", "purejaxrl_opt.evaluate", str(run_dir), "--out",
                            str(run_dir / "evaluate.json")], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def results(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    files = {"summary": {k: v for k, v in summary.items() if k not in NOT_RESULTS},
             "metrics.csv": (run_dir / "metrics.csv").read_text().splitlines()}
    if (run_dir / "evaluate.json").exists():
        evaluation = json.loads((run_dir / "evaluate.json").read_text())
        evaluation.pop("run_dir")
        files["evaluate"] = evaluation
    return files


def differences(before: dict, after: dict, ignore: set[str]) -> list[str]:
    found = []
    summary_keys = set(before["summary"]) | set(after["summary"])
    for key in sorted(summary_keys - ignore):
        if before["summary"].get(key, "<missing>") != after["summary"].get(key, "<missing>"):
            found.append(f"summary[{key}]: {before['summary'].get(key, '<missing>')!r} -> "
                         f"{after['summary'].get(key, '<missing>')!r}")
    if before["metrics.csv"] != after["metrics.csv"]:
        lines = [i for i, (a, b) in enumerate(zip(before["metrics.csv"], after["metrics.csv"])) if a != b]
        found.append(f"metrics.csv differs (lines {lines[:5]}, lengths {len(before['metrics.csv'])} vs "
                     f"{len(after['metrics.csv'])})")
    if before.get("evaluate") != after.get("evaluate"):
        found.append("evaluate CLI output differs")
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("record", "check"))
    parser.add_argument("reference", type=Path)
    parser.add_argument("--only", default=",".join(RUNS), help=f"comma-separated subset of {list(RUNS)}")
    parser.add_argument("--ignore", default="", help="comma-separated summary keys not compared")
    args = parser.parse_args()
    only = [name for name in args.only.split(",") if name]
    unknown = sorted(set(only) - set(RUNS))
    if unknown:
        parser.error(f"--only: unknown runs {unknown}; known: {list(RUNS)}")
    if args.mode == "record":
        run_all(args.reference, only)
        return 0
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        run_all(Path(tmp), only)
        for name in only:
            found = differences(results(args.reference / name), results(Path(tmp) / name),
                                {key for key in args.ignore.split(",") if key})
            print(f"[check_bitwise] {name}: {'SAME' if not found else 'DIFFERENT'}")
            for line in found:
                print(f"    {line}")
            failed |= bool(found)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
