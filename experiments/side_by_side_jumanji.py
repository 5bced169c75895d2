"""Our PPO vs Jumanji's own A2C (``jumanji.training``), same env, same env steps, same seeds.

    python experiments/side_by_side_jumanji.py --env snake --seeds 3000 3001 3002 3003 --steps 307200
    python experiments/side_by_side_jumanji.py --env game_2048 --seeds 3000 3001 3002 3003 --steps 320000

Each side runs in its own process:

* ours: ``python -m purejaxrl_opt.train algo=ppo env=jumanji/<Id>`` (the tuned file
  ``conf/tuned/ppo_jumanji/<Id>.yaml`` applies), the seeds vmapped in one process;
* theirs: ``python -m jumanji.training.train agent=a2c env=<name> seed=S`` from the installed jumanji
  1.1.2, unmodified, one process per seed, with its terminal logger. Only its budget and evaluation
  sizes are overridden through its own Hydra config (``env.training.num_learner_steps_per_epoch``,
  ``env.training.num_epochs``, ``env.evaluation.*_total_batch_size``); network, optimiser, n_steps,
  batch size and loss weights are the package's config for that env. It needs dm-haiku and neptune
  (imported by its loggers), which this project does not depend on: pass the interpreter of an
  environment that has them with ``--peer-python`` (e.g. a venv whose site-packages has a .pth to
  this project's venv plus ``pip install dm-haiku neptune``).

Jumanji's training loop evaluates at the *start* of each epoch, so it is run for one epoch more than
the budget and its evaluation at ``env_steps = budget`` (the last one logged) is the return of the
policy after exactly ``budget`` env steps; the extra epoch's training is not counted (its time is
reported apart). Both sides' returns are greedy (deterministic / argmax) evaluations of the final
policy over ``--eval-episodes`` complete episodes (ours: ``eval_deterministic=true``, theirs:
``Eval Greedy``); theirs ``Eval Stochastic`` and our last training-rollout return are listed too.

Writes ``<out>/<env>.json`` and ``<out>/<env>.md`` (per seed, IQM with a 95% stratified bootstrap
CI, env steps/s, compile/run seconds, load average).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

import provenance  # noqa: E402

from purejaxrl_opt.host import stats  # noqa: E402

# jumanji.training's config name -> (registered id, our env id)
ENVS = {"snake": ("Snake-v1", "jumanji/Snake-v1"), "game_2048": ("Game2048-v1", "jumanji/Game2048-v1"),
        "maze": ("Maze-v0", "jumanji/Maze-v0")}
# what jumanji.training's config sets per env (jumanji/training/configs/env/<name>.yaml, 1.1.2)
PEER_BATCH = {"snake": (20, 128), "game_2048": (50, 32), "maze": (10, 128)}  # (n_steps, total_batch_size)
# the random policy measured as our final evaluation measures: experiments/random_return_nj.py's file
# (uniform over the legal actions), where one was written for the env


def random_policy(name: str) -> dict | None:
    path = ROOT / "experiments" / "results" / f"random_return_jumanji_{ENVS[name][0]}.json"
    if not path.is_file():
        return None
    measured = json.loads(path.read_text())
    legal = measured["uniform_legal_actions"]
    return {"mean": legal["mean"], "se": legal["se"],
            "what": f"{measured['episodes']} episodes, {path.relative_to(ROOT)}"}


_LINE = re.compile(r"(Eval Stochastic|Eval Greedy|Train) >> Env Steps: ([0-9.e+]+) \| (.*)$")


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def parse_peer_log(text: str) -> list[dict]:
    """The terminal logger's lines -> ``[{"label", "env_steps", <metric>: value}]``."""
    rows = []
    for line in text.splitlines():
        match = _LINE.search(line)
        if not match:
            continue
        row = {"label": match.group(1), "env_steps": int(float(match.group(2)))}
        for item in match.group(3).split(" | "):
            key, _, value = item.partition(": ")
            try:
                row[key.strip().lower().replace(" ", "_")] = float(value.replace(",", ""))
            except ValueError:
                pass
        rows.append(row)
    return rows


def log_span_seconds(text: str) -> float | None:
    """Seconds between the first and the last timestamped line of a jumanji.training log."""
    import datetime

    stamps = re.findall(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]", text, re.M)
    if len(stamps) < 2:
        return None
    first, last = (datetime.datetime.strptime(x, "%Y-%m-%d %H:%M:%S,%f") for x in (stamps[0], stamps[-1]))
    return round((last - first).total_seconds(), 1)


def run_peer(args, name: str, seed: int, out: Path) -> dict:
    n_steps, batch = PEER_BATCH[name]
    per_learner_step = n_steps * batch
    learner_steps = args.peer_learner_steps_per_epoch
    per_epoch = per_learner_step * learner_steps
    if args.steps % per_epoch:
        raise SystemExit(f"--steps {args.steps} is not a multiple of the peer's epoch ({per_epoch} env steps "
                         f"= n_steps {n_steps} x batch {batch} x {learner_steps} learner steps)")
    epochs = args.steps // per_epoch
    run_dir = out / f"a2c_{name}_s{seed}"
    command = [args.peer_python, "-m", "jumanji.training.train", "agent=a2c", f"env={name}", f"seed={seed}",
               "logger.type=terminal", f"env.training.num_epochs={epochs + 1}",
               f"env.training.num_learner_steps_per_epoch={learner_steps}",
               f"env.evaluation.eval_total_batch_size={args.eval_episodes}",
               f"env.evaluation.greedy_eval_total_batch_size={args.eval_episodes}",
               f"hydra.run.dir={run_dir}"]
    log = out / f"a2c_{name}_s{seed}.log"
    if args.reuse and log.is_file() and "Closing logger" in log.read_text():
        text = log.read_text()  # a finished run of this command (rerun after a crash of this script)
        timing = (json.loads((run_dir / "timing.json").read_text()) if (run_dir / "timing.json").is_file()
                  else {"wall_s": log_span_seconds(text), "load_before": "not recorded",
                        "load_after": "not recorded"})
    else:
        env = dict(os.environ, JAX_PLATFORMS="cpu")
        timing = {"load_before": load_average()}
        start = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=str(out))
        timing.update(wall_s=round(time.perf_counter() - start, 1), load_after=load_average())
        text = proc.stdout + proc.stderr
        log.write_text(text)
        if proc.returncode != 0:
            raise SystemExit(f"jumanji.training failed (rc {proc.returncode}):\n{text[-4000:]}")
        (run_dir / "timing.json").write_text(json.dumps(timing))
    rows = parse_peer_log(text)
    # the logger prints env steps with 3 significant digits: the k-th evaluation (0-based) is at
    # k * per_epoch env steps, the one after ``epochs`` epochs of training is the last one
    greedy = [r for r in rows if r["label"] == "Eval Greedy"]
    stochastic = [r for r in rows if r["label"] == "Eval Stochastic"]
    train = [r for r in rows if r["label"] == "Train"]
    if len(greedy) != epochs + 1 or len(stochastic) != epochs + 1 or len(train) != epochs + 1:
        raise SystemExit(f"jumanji.training's log lacks the evaluation after {epochs} epochs:\n{text[-3000:]}")
    for k, row in enumerate(greedy):
        assert abs(row["env_steps"] - k * per_epoch) <= 0.01 * max(k * per_epoch, 1), (row, k * per_epoch)
    # epoch 0 includes the compile; epochs 1..epochs-1 are the steady state; the last one is the extra
    steady = [r["time"] for r in train[1:epochs]]
    return {
        "seed": seed, "command": " ".join(command), **timing, "greedy_return": greedy[epochs]["episode_return"],
        "stochastic_return": stochastic[epochs]["episode_return"],
        "greedy_episode_length": greedy[epochs].get("episode_length"),
        "first_epoch_s": round(train[0]["time"], 2),
        "steady_env_steps_per_s": float(per_epoch * len(steady) / sum(steady)) if steady else None,
        "train_env_steps_counted": per_epoch * epochs, "extra_epoch_env_steps": per_epoch,
        "curve": [{"env_steps": k * per_epoch, "greedy_return": g["episode_return"],
                   "stochastic_return": st["episode_return"]}
                  for k, (g, st) in enumerate(zip(greedy, stochastic))],
    }


def run_ours(args, name: str, out: Path) -> dict:
    _, env_id = ENVS[name]
    run_dir = out / f"ppo_{name}"
    command = [sys.executable, "-m", "purejaxrl_opt.train", "algo=ppo", f"env={env_id}",
               f"seed={args.seeds[0]}", f"num_seeds={len(args.seeds)}", f"total_timesteps={args.steps}",
               f"eval_episodes={args.eval_episodes}", f"eval_deterministic={str(args.ours_eval == 'greedy').lower()}", "progress.mode=lines",
               "checkpoint.final=false", "logger=console", f"hydra.run.dir={run_dir}", *args.ours_overrides]
    if args.reuse and (run_dir / "summary.json").is_file() and (run_dir / "timing.json").is_file():
        timing = json.loads((run_dir / "timing.json").read_text())  # a finished run of this command
    else:
        timing = {"load_before": load_average()}
        start = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True, cwd=str(ROOT))
        timing.update(wall_s=round(time.perf_counter() - start, 1), load_after=load_average())
        (out / f"ppo_{name}.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise SystemExit(f"our training failed (rc {proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}")
        (run_dir / "timing.json").write_text(json.dumps(timing))
    summary = json.loads((run_dir / "summary.json").read_text())
    last_train = None
    metrics = run_dir / "metrics.csv"
    if metrics.is_file():
        import csv

        rows = list(csv.DictReader(metrics.open()))
        if rows and "return_mean" in rows[-1]:
            last = [r for r in rows if r.get("update") == rows[-1].get("update")]
            vals = [float(r["return_mean"]) for r in last if r["return_mean"] not in ("", "nan")]
            last_train = float(np.mean(vals)) if vals else None
    return {
        "command": " ".join(command[1:]).replace("-m purejaxrl_opt.train", "python -m purejaxrl_opt.train"),
        **timing, "final_return_per_seed": summary["final_return_per_seed"], "compile_s": summary["compile_seconds"],
        "run_s": summary["run_seconds"], "env_steps_per_s": summary["env_steps_per_second"],
        "env_steps_per_seed": summary["env_steps_per_seed"], "device": summary["device"],
        "last_training_return_mean": last_train, "config": summary["config"],
    }


def interval(values, seed: int) -> dict:
    return stats.stratified_bootstrap_ci(np.asarray(values, float), "iqm", reps=5000, seed=seed).as_dict("iqm")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=sorted(ENVS), default="snake")
    parser.add_argument("--seeds", type=int, nargs="+", default=[3000, 3001, 3002, 3003])
    parser.add_argument("--steps", type=int, default=307_200, help="env steps per seed, both sides")
    parser.add_argument("--peer-seeds", type=int, nargs="*", default=None,
                        help="the A2C's seeds when fewer fit the CPU budget (default: --seeds)")
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--peer-learner-steps-per-epoch", type=int, default=20)
    parser.add_argument("--peer-python", default="/work/peers/jumanji_a2c_venv/bin/python")
    parser.add_argument("--ours-eval", choices=("greedy", "sampled"), default="greedy",
                        help="our final evaluation: argmax actions (as theirs 'Eval Greedy') or sampled ones (as "
                             "theirs 'Eval Stochastic' and the random-policy reference)")
    parser.add_argument("--ours-overrides", nargs="*", default=[])
    parser.add_argument("--reuse", action="store_true",
                        help="read back runs this script finished before (after a crash of the script)")
    parser.add_argument("--out", default=str(ROOT / "experiments/results/side_by_side_jumanji"))
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    name = args.env

    # interleaved: their first seed, ours (all seeds, one process), their other seeds
    peer_seeds = args.seeds if args.peer_seeds is None else args.peer_seeds
    peers = [run_peer(args, name, peer_seeds[0], out)] if peer_seeds else []
    ours = run_ours(args, name, out)
    peers += [run_peer(args, name, s, out) for s in peer_seeds[1:]]

    ours_returns = ours["final_return_per_seed"]
    peer_greedy = [p["greedy_return"] for p in peers]
    peer_stochastic = [p["stochastic_return"] for p in peers]
    rates = [p["steady_env_steps_per_s"] for p in peers if p["steady_env_steps_per_s"]]
    peer_rate = float(np.mean(rates)) if rates else float("nan")
    record = {
        **provenance.stamp(), "env": name, "seeds": args.seeds, "peer_seeds": peer_seeds, "env_steps_per_seed": args.steps,
        "eval_episodes": args.eval_episodes, "ours": ours, "theirs": peers,
        "ours_iqm": interval(ours_returns, 1), "theirs_greedy_iqm": interval(peer_greedy, 2) if peers else None,
        "theirs_stochastic_iqm": interval(peer_stochastic, 3) if peers else None,
        "theirs_env_steps_per_s": peer_rate, "random_policy": random_policy(name),
    }
    (out / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")

    def fmt(iv: dict | None) -> str:
        return "not run" if iv is None else f"{iv['iqm']:.2f} [{iv['iqm_ci_low']:.2f}, {iv['iqm_ci_high']:.2f}]"

    lines = [
        f"# {ENVS[name][0]}: our PPO vs jumanji.training's A2C, {args.steps:,} env steps per seed",
        "",
        f"Seeds: ours {args.seeds}, theirs {peer_seeds} (a report block, experiments/SEEDS.md). Our final evaluation: {args.ours_eval} actions; "
        f"{args.eval_episodes} complete episodes per seed of the final policy. IQM over seeds with a 95% stratified bootstrap CI "
        "(5000 resamples).",
        "",
        "| | per seed | IQM [95% CI] | env steps/s |",
        "|---|---|---|---|",
        f"| ours: PPO ({args.ours_eval}) | {', '.join(f'{x:.2f}' for x in ours_returns)} | {fmt(record['ours_iqm'])} | "
        f"{ours['env_steps_per_s']:,.0f} ({len(args.seeds)} seeds in one process; compile {ours['compile_s']:.0f} s "
        "apart) |",
        *([f"| random policy, uniform over the legal actions | {rnd['what']} | "
            f"{rnd['mean']:.2f} ± {rnd['se']:.2f} (s.e.) | |"] if (rnd := record["random_policy"]) else []),
        *([f"| theirs: A2C, Eval Greedy | {', '.join(f'{x:.2f}' for x in peer_greedy)} | "
           f"{fmt(record['theirs_greedy_iqm'])} | {peer_rate:,.0f} (one seed per process, epochs after the "
           "first) |",
           f"| theirs: A2C, Eval Stochastic | {', '.join(f'{x:.2f}' for x in peer_stochastic)} | "
           f"{fmt(record['theirs_stochastic_iqm'])} | |"] if peers else
          ["| theirs: A2C | not run (--peer-seeds empty: it did not fit this run's CPU budget) | | |"]),
        "",
        f"Our last training rollout's return (sampled actions, mean over seeds): {ours['last_training_return_mean']}. "
        f"Load average before/after ours: {ours['load_before']} / {ours['load_after']}; theirs: "
        + "; ".join(f"{p['load_before']} / {p['load_after']}" for p in peers) + ".",
        "",
        f"Ours: `{ours['command']}`",
        "",
    ]
    if peers:
        lines += [
            "Theirs (one per seed): `" + peers[0]["command"].replace(args.peer_python, "python") + "`",
            "",
            f"Their first epoch (compile included): {', '.join(str(p['first_epoch_s']) for p in peers)} s; "
            f"each ran one extra epoch ({peers[0]['extra_epoch_env_steps']:,} env steps) after the evaluation "
            "reported here (jumanji.training evaluates at the start of an epoch).",
        ]
    (out / f"{name}.md").write_text("\n".join(lines) + "\n" + provenance.markdown_footer())
    print("\n".join(lines))


if __name__ == "__main__":
    main()
