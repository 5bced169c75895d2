"""MuJoCo Playground dm_control tasks: this project's PPO / TRPO / GRPO against Brax's own PPO with
Playground's tuned config, same machine, same env steps, one script.

    # one task, every side, the report seeds (writes <out>/<task>/{brax,ppo,trpo,grpo}.json)
    python experiments/side_by_side_playground.py run --task CartpoleBalance --seeds 3000 3001 3002 3003 \
        --steps 153600 --out experiments/results/side_by_side_playground
    # the table and curves of every task run so far
    python experiments/side_by_side_playground.py report --out experiments/results/side_by_side_playground

The peer: ``brax.training.agents.ppo.train``, unmodified, in its own process (this file's ``peer``
subcommand, started with ``subprocess``; nothing of this project is imported there), on
``mujoco_playground.registry.load(task)`` with ``impl='jax'`` (the library's ``warp`` default needs
CUDA), wrapped by Playground's own ``wrapper.wrap_for_brax_training``, with every key of
``mujoco_playground.config.dm_control_suite_params.brax_ppo_config(task)`` as given, except the
three that set the scale, scaled to a 2-core CPU:

* ``num_envs`` 2048 -> ``--num-envs`` (32); ``batch_size`` 1024 -> ``num_envs / 2``, so one
  training step is 16 unrolls of every env (``batch_size * num_minibatches = 16 * num_envs``), as in
  Playground's config; ``unroll_length`` 30, 32 minibatches x 16 updates per batch, lr 1e-3,
  discount 0.995, entropy 1e-2, reward scaling 10, observation normalisation and 10 resets per
  evaluation block are kept;
* ``num_timesteps`` 60M -> ``--steps``, a whole number of Brax's evaluation blocks
  (``batch_size * unroll_length * num_minibatches * num_resets_per_eval`` = 153,600 at 32 envs);
* ``num_evals`` 2 (the initial policy and the final one), 16 eval envs, ``deterministic_eval=True``.

Both sides are evaluated the same way: the final policy's deterministic (mean) actions over 16
complete 1000-step episodes of the same env (Brax: ``eval/episode_reward``, the mean over its 16
eval envs; ours: ``final_return_per_seed``, the mean over ``eval_episodes=16``). Env steps/s: Brax's
own ``training/sps`` of its last training epoch divided by ``num_resets_per_eval`` (10), which Brax's
formula multiplies in although the timed call runs one tenth of the steps (:func:`brax_sps_factor`;
compile and evaluation excluded; one seed at a time, as Brax trains one seed per call); ours: ``env_steps_per_second`` of the run (all seeds together,
trained as vmapped lanes in one compiled program, compile and final evaluation excluded). Each side
runs in its own process, one after another (never two at once), with ``uptime``'s load recorded
before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

SIDES = ("brax", "ppo", "trpo", "grpo")
EVAL_EPISODES = 16


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --------------------------------------------------------------------------- the peer (own process)
def brax_config(task: str, num_envs: int, steps: int) -> dict:
    """Playground's tuned Brax PPO config for ``task``, scaled to ``num_envs`` and ``steps``."""
    from mujoco_playground.config import dm_control_suite_params

    config = dict(dm_control_suite_params.brax_ppo_config(task))
    tuned = dict(config)
    if num_envs % 2:
        raise SystemExit(f"--num-envs {num_envs}: must be even (batch_size = num_envs / 2)")
    config["num_envs"] = num_envs
    config["batch_size"] = num_envs // 2
    block = (config["batch_size"] * config["unroll_length"] * config["num_minibatches"]
             * config["action_repeat"] * max(config["num_resets_per_eval"], 1))
    if steps % block:
        raise SystemExit(f"--steps {steps}: must be a multiple of Brax's evaluation block, {block} env steps "
                         f"at {num_envs} envs")
    config["num_timesteps"] = steps
    config["num_evals"] = 1 + steps // block
    return {"tuned": tuned, "scaled": config}


def peer_main(args) -> None:
    """Brax PPO on ``args.task`` for each seed, one after another in this process; writes ``args.json``."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    import jax
    from brax.training.agents.ppo import train as ppo
    from mujoco_playground import registry, wrapper

    configs = brax_config(args.task, args.num_envs, args.steps)
    config = configs["scaled"]
    env = registry.load(args.task, config_overrides={"impl": "jax"})
    eval_env = registry.load(args.task, config_overrides={"impl": "jax"})
    per_seed = []
    record = {"side": "brax", "task": args.task, "seeds": [], "env_steps_per_seed": args.steps,
              "brax_config": configs, "per_seed": per_seed, "jax_devices": str(jax.devices())}
    for seed in args.seeds:
        points = []
        start = time.perf_counter()

        def progress(step, metrics, points=points, start=start, seed=seed):
            points.append({"step": int(step), "wall_s": round(time.perf_counter() - start, 2),
                           "eval_return": float(metrics["eval/episode_reward"]),
                           "eval_return_std": float(metrics.get("eval/episode_reward_std", float("nan"))),
                           "sps": float(metrics.get("training/sps", float("nan"))),
                           "train_walltime_s": float(metrics.get("training/walltime", float("nan")))})
            print(f"brax {args.task} seed {seed} step {step}: eval {points[-1]['eval_return']:.1f} "
                  f"sps {points[-1]['sps']:.0f} wall {points[-1]['wall_s']} s", flush=True)

        load_before = load_average()
        ppo.train(environment=env, eval_env=eval_env, wrap_env_fn=wrapper.wrap_for_brax_training,
                  progress_fn=progress, seed=seed, num_eval_envs=EVAL_EPISODES, deterministic_eval=True,
                  **config)
        per_seed.append({"seed": seed, "wall_s": round(time.perf_counter() - start, 1), "points": points,
                         "final_return": points[-1]["eval_return"], "env_steps_per_s": points[-1]["sps"],
                         "load_before": load_before, "load_after": load_average()})
        record["seeds"].append(seed)
        # after every seed, so a run stopped early keeps the seeds it finished
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")


def record_from_log(log: Path, task: str, steps: int, num_envs: int) -> dict:
    """The brax record of a peer run that was stopped before it wrote its JSON, from its progress
    lines (``brax <task> seed <s> step <n>: eval <r> sps <v> wall <w> s``); finished seeds only."""
    import re

    line = re.compile(rf"^brax {task} seed (\d+) step (\d+): eval ([-\d.]+) sps ([-\w.]+) wall ([\d.]+) s$")
    seeds: dict[int, list] = {}
    for text in log.read_text().splitlines():
        match = line.match(text.strip())
        if match:
            seed, step, ret, sps, wall = match.groups()
            seeds.setdefault(int(seed), []).append({"step": int(step), "wall_s": float(wall),
                                                    "eval_return": float(ret), "sps": float(sps)})
    per_seed = [{"seed": seed, "points": points, "final_return": points[-1]["eval_return"],
                 "env_steps_per_s": points[-1]["sps"], "wall_s": points[-1]["wall_s"]}
                for seed, points in seeds.items() if points[-1]["step"] >= steps]
    return {"side": "brax", "task": task, "seeds": [s["seed"] for s in per_seed], "env_steps_per_seed": steps,
            "brax_config": brax_config(task, num_envs, steps), "per_seed": per_seed,
            "source": f"progress lines of the peer's log {log.name}: the process was stopped before it "
                      "wrote its JSON; seeds that finished only"}


# --------------------------------------------------------------------------- our side (own process)
def our_overrides(side: str, task: str, seeds: list[int], steps: int) -> list[str]:
    """The CLI overrides of our run: the env file and tuned file of (side, task); seeds as lanes."""
    return [f"algo={side}", f"env=playground/{task}", f"seed={seeds[0]}", f"num_seeds={len(seeds)}",
            f"total_timesteps={steps}", f"eval_episodes={EVAL_EPISODES}", "eval_deterministic=true",
            "progress.mode=lines", "checkpoint.final=false", "logger=none"]


def run_ours(side: str, task: str, seeds: list[int], steps: int, run_dir: Path, extra: list[str],
             cache_dir: str) -> dict:
    overrides = our_overrides(side, task, seeds, steps) + list(extra) + [f"hydra.run.dir={run_dir}"]
    command = [sys.executable, "-m", "purejaxrl_opt.train"] + overrides
    load_before = load_average()
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, env=dict(os.environ, JAX_COMPILATION_CACHE_DIR=cache_dir))
    wall = time.perf_counter() - start
    summary = json.loads((run_dir / "summary.json").read_text())
    curve = _training_curve(run_dir / "metrics.csv")
    return {"side": side, "task": task, "seeds": seeds, "env_steps_per_seed": steps,
            "command": " ".join(command[1:]), "wall_s": round(wall, 1),
            "compile_s": summary["compile_seconds"], "run_s": summary["run_seconds"],
            "final_return_per_seed": summary["final_return_per_seed"],
            "env_steps_per_s": summary["env_steps_per_second"], "num_lanes": summary["num_lanes"],
            "env_steps_per_seed_run": summary["env_steps_per_seed"], "updates": summary["num_updates"],
            "config": summary["config"], "device": summary.get("device"), "parallel": summary.get("parallel"),
            "curve": curve, "load_before": load_before, "load_after": load_average()}


def _training_curve(path: Path) -> dict:
    """Per seed, per update with finished episodes: env steps and the mean training episode return
    (metrics.csv's ``return_mean``)."""
    import csv

    out: dict[str, dict] = {}
    for row in csv.DictReader(path.open()):
        if row.get("return_mean") in ("", "nan", None):
            continue
        lane = out.setdefault(row["seed"], {"env_steps": [], "episode_return": []})
        lane["env_steps"].append(float(row["env_steps"]))
        lane["episode_return"].append(float(row["return_mean"]))
    return out


# --------------------------------------------------------------------------- run one task
def run_main(args) -> None:
    from provenance import stamp

    out = Path(args.out) / args.task
    out.mkdir(parents=True, exist_ok=True)
    provenance = stamp()
    for side in args.sides:
        target = out / f"{side}.json"
        if side == "brax":
            command = [sys.executable, str(Path(__file__).resolve()), "peer", "--task", args.task, "--seeds",
                       *map(str, args.seeds), "--steps", str(args.steps), "--num-envs", str(args.num_envs),
                       "--json", str(target)]
            load_before = load_average()
            start = time.perf_counter()
            # a persistent compilation cache: Brax builds new jitted functions on every train() call,
            # so each seed would compile again; compile time is not in either side's env steps/s
            env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=args.cache_dir)
            subprocess.run(command, cwd=ROOT, check=True, env=env)
            record = json.loads(target.read_text())
            record.update({"wall_s": round(time.perf_counter() - start, 1), "load_before": load_before,
                           "load_after": load_average(), "peer_command": " ".join(command[1:])})
        else:
            record = run_ours(side, args.task, args.seeds, args.steps, out / f"run_{side}",
                              args.override.get(side, []), args.cache_dir)
        record.update(provenance)
        target.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {target}", flush=True)


# --------------------------------------------------------------------------- report
def _finals(record: dict) -> list[float]:
    if record["side"] == "brax":
        return [s["final_return"] for s in record["per_seed"]]
    return record["final_return_per_seed"]


def brax_sps_factor(record: dict) -> int:
    """What Brax's ``training/sps`` over-counts by: ``max(num_resets_per_eval, 1)``. brax 0.14.2's
    ``training_epoch_with_timing`` times one ``training_epoch`` call (``num_training_steps_per_epoch``
    training steps) but multiplies its env steps by ``num_resets_per_eval``, whose loop runs outside
    the timed call (``ppo/train.py``: the ``for _ in range(max(num_resets_per_eval, 1))`` around it);
    Playground's dm_control configs set it to 10."""
    return max(int(record["brax_config"]["scaled"].get("num_resets_per_eval", 0)), 1)


def _sps(record: dict) -> float:
    """Env steps/s of the side's whole run of its seeds (Brax: one seed at a time, the median of its
    seeds' last ``training_epoch`` call, from ``training/sps`` divided by :func:`brax_sps_factor`;
    ours: all lanes together)."""
    import numpy as np

    if record["side"] == "brax":
        return float(np.median([s["env_steps_per_s"] for s in record["per_seed"]])) / brax_sps_factor(record)
    return float(record["env_steps_per_s"])


def report_main(args) -> None:
    import numpy as np

    from provenance import stamp
    from purejaxrl_opt.host import stats

    out = Path(args.out)
    tasks = sorted(p.name for p in out.iterdir() if p.is_dir() and any(p.glob("*.json")))
    rows, table = [], {}
    for task in tasks:
        records = {side: json.loads((out / task / f"{side}.json").read_text())
                   for side in SIDES if (out / task / f"{side}.json").exists()}
        # further Brax seeds run as separate peer processes (``peer --json <task>/brax_<seed>.json``)
        for extra in sorted((out / task).glob("brax_*.json")):
            more = json.loads(extra.read_text())
            if "brax" not in records:
                records["brax"] = more
                continue
            known = set(records["brax"]["seeds"])
            records["brax"]["per_seed"] += [s for s in more["per_seed"] if s["seed"] not in known]
            records["brax"]["seeds"] = [s["seed"] for s in records["brax"]["per_seed"]]
        brax_sps = _sps(records["brax"]) if "brax" in records else None
        for side, record in records.items():
            finals = np.asarray(_finals(record), float)
            ci = stats.stratified_bootstrap_ci(finals, "iqm", reps=2000, seed=0)
            t_half = stats.t_half_width(finals)
            sps = _sps(record)
            initial = ([s["points"][0]["eval_return"] for s in record["per_seed"] if s["points"][0]["step"] == 0]
                       if side == "brax" else [])
            entry = {"task": task, "side": side, "seeds": record["seeds"],
                     "initial_policy_return_mean": round(float(np.mean(initial)), 1) if initial else None,
                     "source": record.get("source"), "final_return_per_seed":
                     [round(float(x), 1) for x in finals], "iqm": round(ci.value, 1),
                     "iqm_ci95": [round(ci.low, 1), round(ci.high, 1)], "mean": round(float(finals.mean()), 1),
                     "t_half_width95": None if t_half is None else round(t_half, 1),
                     "env_steps_per_s": round(sps), "sps_ratio_vs_brax": None if not brax_sps
                     else round(sps / brax_sps, 2), "load": [record.get("load_before"), record.get("load_after")],
                     "wall_s": record.get("wall_s"), "commit": record.get("commit"),
                     "command": record.get("command")}
            rows.append(entry)
            table.setdefault(task, {})[side] = entry
    summary = {**stamp(), "rows": rows}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    names = {"brax": "Brax PPO (Playground config)", "ppo": "our PPO", "trpo": "our TRPO",
             "grpo": "our GRPO (same-start groups)"}
    lines = ["# MuJoCo Playground: our PPO / TRPO / GRPO vs Brax PPO, side by side", "",
             "Final return: deterministic policy, mean over 16 complete 1000-step episodes per seed; IQM over "
             "seeds with a 95% stratified-bootstrap CI, and mean +- Student-t 95% half-width. Env steps/s: "
             "compile and evaluation excluded (Brax: one seed per run, the median over seeds of its last "
             "training_epoch's `training/sps` divided by num_resets_per_eval = 10, which brax 0.14.2's "
             "formula multiplies in although the timed call runs a tenth of the steps; ours: all "
             "seeds of the run as vmapped lanes). Load: `uptime`'s 1/5/15-min averages before and after "
             "each side (a 2-core machine: about 2 means this run alone, far more means other jobs shared it).", "",
             "| task | side | seeds | final return per seed | IQM [95% CI] | mean +- t | env steps/s | x Brax | "
             "load before -> after |", "|---|---|---|---|---|---|---|---|---|"]
    for entry in rows:
        seeds = entry["seeds"]
        load = entry["load"]
        lines.append(
            f"| {entry['task']} | {names[entry['side']]} | {seeds[0]}-{seeds[-1]} | "
            f"{', '.join(f'{x:.0f}' for x in entry['final_return_per_seed'])} | {entry['iqm']:.0f} "
            f"[{entry['iqm_ci95'][0]:.0f}, {entry['iqm_ci95'][1]:.0f}] | {entry['mean']:.0f} +- "
            f"{entry['t_half_width95'] if entry['t_half_width95'] is not None else float('nan'):.0f} | "
            f"{entry['env_steps_per_s']:,} | {entry['sps_ratio_vs_brax'] or float('nan'):.2f} | "
            f"{load[0][0] if load[0] else '?'} -> {load[1][0] if load[1] else '?'} |")
    for entry in rows:
        if entry["initial_policy_return_mean"] is not None:
            lines.append(f"\n{entry['task']}: Brax's evaluation of its initial (untrained) policy, step 0, "
                         f"mean over seeds: {entry['initial_policy_return_mean']:.0f}.")
        if entry["source"]:
            lines.append(f"\n{entry['task']} / {entry['side']}: {entry['source']}.")
    lines += ["", "Commands: each task's `<task>/<side>.json` names the commit and the exact command; "
              "ours also the CLI overrides (`command`)."]
    (out / "summary.md").write_text("\n".join(lines) + "\n" + f"\ncommit: {summary['commit']}\n"
                                    f"command: `{summary['command']}`\n")
    _plot(out, tasks)
    print("\n".join(lines))


def _plot(out: Path, tasks: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for side, colour in zip(SIDES, ("k", "tab:blue", "tab:green", "tab:red")):
            path = out / task / f"{side}.json"
            if not path.exists():
                continue
            record = json.loads(path.read_text())
            if side == "brax":
                for i, s in enumerate(record["per_seed"]):
                    steps = [p["step"] for p in s["points"]]
                    ax.plot(steps, [p["eval_return"] for p in s["points"]], "o--", color=colour, alpha=0.6,
                            label="Brax PPO eval (deterministic)" if i == 0 else None)
            else:
                for i, lane in enumerate(record["curve"].values()):
                    ax.plot(lane["env_steps"], np.asarray(lane["episode_return"]), color=colour, alpha=0.5,
                            label=f"our {side.upper()} training episodes" if i == 0 else None)
                finals = record["final_return_per_seed"]
                ax.plot([record["env_steps_per_seed"]] * len(finals), finals, "s", color=colour, alpha=0.8,
                        label=f"our {side.upper()} final eval (deterministic)")
        ax.set_title(task)
        ax.set_xlabel("env steps per seed")
        ax.set_ylabel("episode return (1000 steps)")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="every side on one task")
    run.add_argument("--task", required=True)
    run.add_argument("--seeds", type=int, nargs="+", required=True)
    run.add_argument("--steps", type=int, default=153_600)
    run.add_argument("--num-envs", type=int, default=32, help="Brax's num_envs (ours: the tuned file's)")
    run.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    run.add_argument("--override", action="append", default=[], metavar="SIDE:KEY=VALUE",
                     help="an extra CLI override for one of our sides, e.g. ppo:algo.lr=1e-3")
    run.add_argument("--out", default="experiments/results/side_by_side_playground")
    run.add_argument("--cache-dir", default="/tmp/side_by_side_playground_jax_cache",
                     help="JAX's persistent compilation cache for both sides")
    peer = sub.add_parser("peer", help="(internal) Brax PPO in this process")
    peer.add_argument("--task", required=True)
    peer.add_argument("--seeds", type=int, nargs="+", required=True)
    peer.add_argument("--steps", type=int, required=True)
    peer.add_argument("--num-envs", type=int, required=True)
    peer.add_argument("--json", required=True)
    from_log = sub.add_parser("from-log", help="<out>/<task>/brax.json from a stopped peer's log")
    from_log.add_argument("--task", required=True)
    from_log.add_argument("--log", required=True)
    from_log.add_argument("--steps", type=int, default=153_600)
    from_log.add_argument("--num-envs", type=int, default=32)
    from_log.add_argument("--out", default="experiments/results/side_by_side_playground")
    report = sub.add_parser("report", help="table + curves of every task in --out")
    report.add_argument("--out", default="experiments/results/side_by_side_playground")
    args = parser.parse_args()
    if args.command == "peer":
        peer_main(args)
    elif args.command == "from-log":
        from provenance import stamp

        record = {**record_from_log(Path(args.log), args.task, args.steps, args.num_envs), **stamp()}
        target = Path(args.out) / args.task / "brax.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {target}: seeds {record['seeds']}")
    elif args.command == "run":
        overrides: dict[str, list[str]] = {}
        for item in args.override:
            side, _, value = item.partition(":")
            if side not in SIDES or not value:
                raise SystemExit(f"--override {item!r}: must be SIDE:KEY=VALUE with SIDE one of {SIDES[1:]}")
            overrides.setdefault(side, []).append(value)
        args.override = overrides
        run_main(args)
    else:
        report_main(args)


if __name__ == "__main__":
    main()
