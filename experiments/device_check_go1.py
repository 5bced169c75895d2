"""Go1JoystickFlatTerrain on the accelerator: our PPO's learning curve against Brax's PPO at Playground's
own budget and scale, one seed a side, each side its own process, one after the other.

    python experiments/device_check_go1.py                         # both sides, Playground's 200M steps
    python experiments/device_check_go1.py --side brax --steps 50000000   # one side per device call
    python experiments/device_check_go1.py --small --out /tmp/go1       # CPU dry run: 32 envs, 6,400 steps

Both sides train Playground's ``locomotion_params.brax_ppo_config('Go1JoystickFlatTerrain')``: 8,192
envs, unrolls of 20 steps, 32 minibatches x 4 epochs, lr 3e-4, discount 0.97, a 512-256-128 swish
policy on ``state`` and the same value network on ``privileged_state`` (the asymmetric critic), Brax's
observation normalisation, 200M env steps, 10 evaluations of 128 envs with the deterministic policy.

* Brax: experiments/peer_brax_ppo.py ``--as-playground`` (its ``ppo.train`` as Playground's
  ``learning/train_jax_ppo.py`` calls it, no domain randomisation: that script's default);
* ours: ``python -m purejaxrl_opt.train algo=ppo env=playground/Go1JoystickFlatTerrain`` with the mapped
  config (docs/environments.md), ``num_seeds=1``, evaluated every tenth of the run with 128
  deterministic episodes (``eval_every``, ``eval_episodes=128``).

Go1 reads its robot from mujoco_menagerie (``$MENAGERIE_ROOT``; docs/environments.md). Where none is
set and Playground has none, the run writes a menagerie holding only Go1's five visual meshes, as
small valid meshes (tests/go1_meshes.py: the visual geoms have no contact and every body its own
inertia, so dynamics, observations and rewards are the real ones), and points both sides at it.

``--small`` (CPU dry run, how the slow test tier runs it): 32 envs, one Brax evaluation block (6,400 env
steps), 16 eval episodes (ours: one evaluation, at the end), both sides end to end. Writes ``--out``/brax.json, ``--out``/run_ppo/ and
``--out``/results.json + results.md: per side the evaluation curve (env steps, return, seconds),
the final return, env steps/s and compile seconds, with commit and command (provenance). A side that
fails is recorded with its exit code and the tail of its log; the other still runs. Seeds: 3400
(report range, experiments/SEEDS.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import provenance

ROOT = Path(__file__).resolve().parents[1]
TASK = "Go1JoystickFlatTerrain"
PYTHON = sys.executable


def menagerie_env(out: Path) -> dict:
    """The environment of both sides' processes: ``MENAGERIE_ROOT`` as set, else Playground's own
    menagerie when it exists, else a visual-mesh menagerie written under ``out``."""
    env = dict(os.environ)
    if env.get("MENAGERIE_ROOT"):
        return env
    from mujoco_playground._src import mjx_env

    if Path(str(mjx_env.MENAGERIE_PATH)).exists():
        return env
    sys.path.insert(0, str(ROOT / "tests"))
    from go1_meshes import write_go1_visual_meshes

    env["MENAGERIE_ROOT"] = str(write_go1_visual_meshes(out / "menagerie"))
    return env


def run_side(command: list[str], log: Path, env: dict, timeout_s: float) -> dict:
    """Run one side's process, its output to ``log``; its exit code, seconds and log tail."""
    start = time.perf_counter()
    with open(log, "w") as sink:
        try:
            rc = subprocess.run(command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    tail = log.read_text().splitlines()[-15:]
    return {"command": " ".join(command), "rc": rc, "wall_s": round(time.perf_counter() - start, 1),
            "log": str(log), "log_tail": tail if rc != 0 else []}


def brax_side(record_path: Path) -> dict:
    from purejaxrl_opt.host.readers import brax_env_steps_per_s

    record = json.loads(record_path.read_text())
    seed = record["per_seed"][0]
    points = [{"env_steps": p["step"], "return": p["eval_return"], "wall_s": p["wall_s"]} for p in seed["points"]]
    # Brax reports its first evaluation after compiling: the time to it is its compile and first eval
    return {"curve": points, "final_return": seed["final_return"], "env_steps_per_s": brax_env_steps_per_s(record, seed),
            "first_eval_wall_s": points[0]["wall_s"] if points else None}


def ours_side(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    curve = []
    with open(run_dir / "metrics.csv") as f:
        for row in csv.DictReader(f):
            value = row.get("eval_return", "")
            if value not in ("", "nan"):
                curve.append({"env_steps": int(float(row["env_steps"])), "return": float(value)})
    final = summary.get("final_return_per_seed") or [float("nan")]
    return {"curve": curve, "final_return": final[0], "env_steps_per_s": summary.get("env_steps_per_second"),
            "compile_s": summary.get("compile_seconds"), "run_s": summary.get("run_seconds")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", choices=("both", "ours", "brax"), default="both")
    parser.add_argument("--seed", type=int, default=3400)
    parser.add_argument("--steps", type=int, default=None, help="env steps (default: Playground's 200M)")
    parser.add_argument("--small", action="store_true", help="CPU dry run: 32 envs, 6,400 env steps")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="per side")
    parser.add_argument("--out", default=str(ROOT / "experiments/results/device_check/go1"))
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = menagerie_env(out)
    # Brax's evaluation block at 32 envs: batch 256 * 32 / 8192 = 1, x 20 steps x 32 minibatches x 10 resets
    steps = 6400 if args.small else (args.steps or 200_000_000)
    results = {"task": TASK, "seed": args.seed, "steps": steps, "small": args.small,
               "menagerie": env.get("MENAGERIE_ROOT", "Playground's own"), "machine": provenance.machine(), "sides": {},
               **provenance.stamp()}

    def write() -> None:
        (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")

    if args.side in ("both", "brax"):
        scale = (["--num-envs", "32", "--steps", str(steps)] if args.small
                 else ["--as-playground", "--steps", str(steps)])
        command = [PYTHON, "experiments/peer_brax_ppo.py", "--task", TASK, "--seeds", str(args.seed), *scale,
                   "--json", str(out / "brax.json")]
        side = run_side(command, out / "brax.log", env, args.timeout_s)
        if side["rc"] == 0:
            side.update(brax_side(out / "brax.json"))
        results["sides"]["brax"] = side
        write()
    if args.side in ("both", "ours"):
        num_envs = 32 if args.small else 8192
        updates = max(1, steps // (num_envs * 20))
        command = [PYTHON, "-m", "purejaxrl_opt.train", "algo=ppo", f"env=playground/{TASK}", f"seed={args.seed}",
                   "num_seeds=1", f"algo.num_envs={num_envs}", f"total_timesteps={steps}",
                   f"eval_every={updates if args.small else max(1, math.ceil(updates / 10))}",
                   f"eval_episodes={16 if args.small else 128}",
                   "eval_deterministic=true", "progress.mode=lines", "logger=none",
                   f"hydra.run.dir={out / 'run_ppo'}"]
        side = run_side(command, out / "ours.log", env, args.timeout_s)
        if side["rc"] == 0:
            side.update(ours_side(out / "run_ppo"))
        results["sides"]["ours"] = side
        write()
    lines = [f"# {TASK}: our PPO vs Brax's PPO (Playground's config{', CPU dry run' if args.small else ''})", "",
             f"seed {args.seed}, {steps:,} env steps a side; machine: {json.dumps(results['machine'])}",
             "", "| side | final return | env steps/s | curve (env steps: return) | exit |", "|---|---:|---:|---|---|"]
    for name, side in results["sides"].items():
        curve = ", ".join(f"{p['env_steps']:,}: {p['return']:.1f}" for p in side.get("curve", []))
        final, rate = side.get("final_return"), side.get("env_steps_per_s")
        lines.append(f"| {name} | {'—' if final is None else f'{final:.1f}'} | {'—' if rate is None else f'{rate:,.0f}'} "
                     f"| {curve} | {side['rc']} |")
    lines += ["", f"commit: {results['commit']}", f"command: `{results['command']}`"]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    write()
    print("\n".join(lines))
    if any(side["rc"] != 0 for side in results["sides"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
