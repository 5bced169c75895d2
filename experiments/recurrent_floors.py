"""The memory floors of issue 14, as CLI runs: recurrent (GRU) vs feed-forward (MLP) policies on partially
observable envs. Every run is one ``python -m purejaxrl_opt.train`` command (8 seeds vmapped); the settings
are the tuned files conf/tuned/{ppo,trpo}_CartPole-v1-novel.yaml and conf/tuned/ppo_MemoryChain-bsuite-10.yaml,
which set ``network.recurrent: gru``; each MLP control is the same command with ``network.recurrent=none``
(the same batch, budget and torso). This script runs the chosen ones and writes their per-seed final
returns, commands, wall time and throughput to experiments/results/recurrent_floors.json (and .md).

Calibrated on seeds 0-7 (``--seed 0``); the shipped results are held-out seeds 100-107 (``--seed 100``).

    python experiments/recurrent_floors.py --seed 100               # every run
    python experiments/recurrent_floors.py --only ppo_gru_cartpole_novel,ppo_mlp_cartpole_novel
    python experiments/recurrent_floors.py --extra algo.lr=1e-3     # calibration: extra overrides

CartPole-v1 "novel" = no velocities: ``env.obs_mask=[1,0,1,0]`` keeps the cart position and pole angle.
MemoryChain-bsuite with memory_length 10: the context bit is shown at the first step only and must be
recalled at the last (+1 right, -1 wrong: an MLP is at chance, 0).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import provenance

ROOT = Path(__file__).resolve().parents[1]
NOVEL = "env=CartPole-v1-novel"  # conf/env/CartPole-v1-novel.yaml: env.obs_mask=[1,0,1,0]
MEMORY = ["env=MemoryChain-bsuite-10"]  # conf/env/MemoryChain-bsuite-10.yaml: memory_length 10

# name -> (overrides, floor on the mean final return or None for a control, what it shows); the rest of
# the settings come from conf/tuned/<algo>_<env>.yaml
MLP = "network.recurrent=none"
RUNS: dict[str, tuple[list[str], float | None, str]] = {
    "ppo_gru_cartpole_novel": (["algo=ppo", NOVEL], 450.0, "PPO-GRU, CartPole without velocities"),
    "ppo_mlp_cartpole_novel": (["algo=ppo", NOVEL, MLP], None,
                               "control: PPO-MLP, the same env, batch and budget"),
    "trpo_gru_cartpole_novel": (["algo=trpo", NOVEL], 400.0, "TRPO-GRU, CartPole without velocities"),
    "trpo_mlp_cartpole_novel": (["algo=trpo", NOVEL, MLP], None,
                                "control: TRPO-MLP, the same env, batch and budget"),
    "ppo_gru_memorychain10": (["algo=ppo", *MEMORY], 0.9, "PPO-GRU, MemoryChain memory_length 10 (max return 1)"),
    "ppo_mlp_memorychain10": (["algo=ppo", *MEMORY, MLP], None, "control: PPO-MLP on the same MemoryChain"),
}


def command(name: str, seed: int, extra: list[str], run_dir: Path) -> list[str]:
    overrides, _, _ = RUNS[name]
    return [sys.executable, "-m", "purejaxrl_opt.train", *overrides, f"seed={seed}", "num_seeds=8", *extra,
            "logger=none",
            "progress.mode=off", "checkpoint.final=false", f"hydra.run.dir={run_dir}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(RUNS), help=f"comma-separated subset of {list(RUNS)}")
    parser.add_argument("--seed", type=int, default=100, help="base seed: lanes seed..seed+7")
    parser.add_argument("--extra", nargs="*", default=[], help="extra overrides for every run")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results" / "recurrent_floors"))
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(RUNS))
    if unknown:
        parser.error(f"--only: unknown runs {unknown}; known: {list(RUNS)}")

    commit = provenance.commit()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            run_dir = Path(tmp) / name
            cmd = command(name, args.seed, args.extra, run_dir)
            shown = "python -m purejaxrl_opt.train " + " ".join(shlex.quote(c) for c in cmd[3:-1])
            print(f"[recurrent_floors] {name}: {shown}", flush=True)
            start = time.time()
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                results[name] = {"command": shown, "error": proc.stderr[-2000:]}
                continue
            summary = json.loads((run_dir / "summary.json").read_text())
            _, floor, what = RUNS[name]
            per_seed = summary["final_return_per_seed"]
            mean = float(summary["final_return_mean"])
            results[name] = {
                "what": what, "command": shown, "floor": floor,
                "passes": None if floor is None else bool(mean >= floor),
                "seeds": list(range(args.seed, args.seed + 8)),
                "final_return_mean": mean, "final_return_per_seed": per_seed,
                "env_steps_per_second": summary["env_steps_per_second"],
                "compile_seconds": summary["compile_seconds"], "wall_seconds": time.time() - start,
                "device": summary["device"], "jax_version": summary["jax_version"],
                "hparams": summary.get("hparams"), "commit": commit,
            }
            print(f"[recurrent_floors] {name}: mean {mean:.3f} per seed {per_seed}", flush=True)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.with_suffix(".json").exists():  # runs made separately accumulate: this run's entries replace
        earlier = json.loads(out.with_suffix(".json").read_text())
        results = {name: (results[name] if name in results else earlier[name])
                   for name in RUNS if name in results or name in earlier}
    out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    lines = ["8 vmapped agents per run; final return = mean of 16 deterministic evaluation episodes per seed "
             "after training.", "",
             "| run | seeds | floor | mean final return | per seed | env steps/s | wall s |",
             "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | | | error | | | |")
            continue
        seeds = ", ".join(f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}" for x in r["final_return_per_seed"])
        floor = "control" if r["floor"] is None else f">= {r['floor']:g}"
        lines.append(f"| {name} | {r['seeds'][0]}-{r['seeds'][-1]} | {floor} | {r['final_return_mean']:.2f} | "
                     f"{seeds} | {r['env_steps_per_second']:.0f} | {r['wall_seconds']:.0f} |")
    lines += ["", "Commands:", ""] + [f"    {r['command']}" for r in results.values()]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r.get("passes") is not False and "error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
