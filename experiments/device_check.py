"""Training throughput on whatever accelerator JAX finds: PPO / TRPO / GRPO at 1 / 8 / 32 / 1024 lanes
on CartPole-v1, Breakout-MinAtar (the conv torso), playground/CartpoleBalance (MJX physics) and
craftax/Craftax-Symbolic-v1, written to one JSON. Run through ``experiments/device_check.sh``.

A *lane* is one independent agent (a seed): ``num_seeds`` lanes train as one compiled program, vmapped
(bench_throughput.py's ``ENVSxLANES`` shapes, here with a fixed small ``num_envs`` per lane), laid out
on the devices as the CLI does (``parallel.lanes=auto``). Each measurement: compile the runner's
functions (:class:`purejaxrl_opt.host.runner.Compiled`), one warm-up update, then ``updates`` timed
updates; env steps/s counts every lane's real env steps (the loop's own ``env_steps`` counter).

Order and budget: every (env, algo) at 1 and 1024 lanes first, then at 32 and 8, so a budget cut
(``--budget-s``, default 510 s of the 600 s the shell script allows) drops the middle of the curve,
not an env. What is skipped, or fails (e.g. out of memory), is recorded with its reason; the JSON is
rewritten after every measurement, so a killed run keeps what it measured.

``DEVICE_CHECK_SMALL=1`` (or ``--small``): a dry run sized for a CPU: lanes 1 and 2 (1 on Playground
and Craftax), short rollouts, one timed update; every env and algorithm still compiles and runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import provenance

ROOT = Path(__file__).resolve().parents[1]
from purejaxrl_opt.host.xla_flags import set_default_xla_flags  # noqa: E402  (before JAX starts)

set_default_xla_flags()  # the CLI's defaults: on a CPU, one host device per core; none on GPU/TPU

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from purejaxrl_opt.config.implementations import CONV_IMPLS  # noqa: E402

ENVS = ("CartPole-v1", "Breakout-MinAtar", "playground/CartpoleBalance", "craftax/Craftax-Symbolic-v1")
ALGOS = ("ppo", "trpo", "grpo")
HEAVY = ("playground/", "craftax/")  # compiles of minutes on a CPU


def shapes(env_id: str, small: bool) -> dict:
    """Per-lane rollout shape: ``num_envs`` x ``num_steps`` (PPO/TRPO), GRPO's groups of episodes cut
    at ``max_episode_steps``."""
    steps = 8 if small else (64 if env_id.startswith(HEAVY) else 128)
    return {"num_envs": 4, "num_steps": steps, "num_groups": 1, "group_size": 4, "max_episode_steps": steps}


def plan(small: bool, env_ids=ENVS, algo_names=ALGOS, lanes=None) -> list[tuple[str, str, int]]:
    """(env, algo, lanes) in measurement order; ``lanes`` (a list) replaces the default rounds with one
    round per lane count, in that order."""
    order = []
    rounds = [[n] for n in lanes] if lanes else (([1], [2]) if small else ([1, 1024], [32, 8]))
    for lanes_round in rounds:
        for env_id in env_ids:
            for algo in algo_names:
                for lanes in lanes_round:
                    if small and lanes > 1 and env_id.startswith(HEAVY):
                        continue
                    order.append((env_id, algo, lanes))
    return order


def run_config(env_id: str, algo: str, lanes: int, updates: int, small: bool, conv_impl: str = "auto"):
    from purejaxrl_opt.config.schema import algo_config, EnvConfig, NetworkConfig, RunConfig

    shape = shapes(env_id, small)
    if algo == "grpo":
        cfg = algo_config(algo)(num_groups=shape["num_groups"], group_size=shape["group_size"],
                                 max_episode_steps=shape["max_episode_steps"], num_minibatches=1)
        per_update = shape["num_groups"] * shape["group_size"] * shape["max_episode_steps"]
    else:
        cfg = algo_config(algo)(num_envs=shape["num_envs"], num_steps=shape["num_steps"])
        per_update = shape["num_envs"] * shape["num_steps"]
    run = RunConfig(algo=cfg, env=EnvConfig(id=env_id, normalize_obs=env_id.startswith("playground/")),
                    network=NetworkConfig(conv_impl=conv_impl), seed=0, num_seeds=lanes,
                    total_timesteps=per_update * (updates + 1), eval_episodes=1)
    run.validate()
    return run


def measure(env_id: str, algo_name: str, lanes: int, updates: int, small: bool, env_cache: dict,
            conv_impl: str = "auto") -> dict:
    from purejaxrl_opt.core import algos
    from purejaxrl_opt.host import parallel
    from purejaxrl_opt.host.runner import Compiled
    from purejaxrl_opt.host.sweep import lane_inputs

    run = run_config(env_id, algo_name, lanes, updates, small, conv_impl)
    if env_id not in env_cache:
        env_cache[env_id] = algos.make_env(run)
    algo = algos.make_algorithm(run, env_cache[env_id])
    keys, hparams = lane_inputs(run)
    layout = parallel.make_layout(parallel.ParallelConfig(), run, lanes)
    compiled = Compiled(algo, keys, hparams, layout)
    keys, hparams = compiled.place_inputs(keys, hparams)
    loop = compiled.init(keys, hparams)
    loop = compiled.updates(loop, jnp.int32(0), jnp.int32(1))  # warm-up: first execution
    before = _env_steps(loop)
    start = time.perf_counter()
    loop = compiled.updates(loop, jnp.int32(1), jnp.int32(1 + updates))
    jax.block_until_ready(loop)
    seconds = time.perf_counter() - start
    after = _env_steps(loop)
    record = {"env": env_id, "algo": algo_name, "lanes": lanes, "updates_timed": updates,
              "compile_s": round(compiled.seconds, 2), "timed_s": round(seconds, 4),
              "env_steps_timed": int(after - before), "env_steps_per_s": round((after - before) / seconds, 1),
              "per_lane_env_steps_per_s": round((after - before) / seconds / lanes, 1),
              "shape": shapes(env_id, small), "lane_blocks": layout.lane_rows if layout.active else 1}
    stats = _memory_stats()
    if stats:
        record["peak_bytes_in_use"] = stats
    return record


def _env_steps(loop) -> float:
    """Every lane's env steps so far (the loop's uint32 counters), summed exactly on the host."""
    import numpy as np

    return float(np.asarray(jax.device_get(loop.env_steps)).astype(np.float64).sum())


def _memory_stats():
    try:
        stats = jax.local_devices()[0].memory_stats() or {}
    except Exception:  # not every backend reports memory
        return None
    return stats.get("peak_bytes_in_use")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "experiments/results/device_check/device_check.json"))
    parser.add_argument("--budget-s", type=float, default=float(os.environ.get("DEVICE_CHECK_BUDGET_S", 510)))
    parser.add_argument("--small", action="store_true", default=os.environ.get("DEVICE_CHECK_SMALL") == "1")
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=ENVS)
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS)
    parser.add_argument("--conv-impl", default="auto", choices=CONV_IMPLS,
                        help="network.conv_impl for the conv torso (MinAtar); purejaxrl_opt/config/implementations.py "
                        "says what auto picks per backend")
    parser.add_argument("--lanes", nargs="+", type=int, default=None,
                        help="measure these lane counts only, in this order (default: 1 and 1024, then 32 and 8)")
    parser.add_argument("--updates", type=int, default=None, help="timed updates per measurement (default 3; "
                        "small: 1)")
    args = parser.parse_args()
    updates = args.updates or (1 if args.small else 3)
    from provenance import stamp

    from purejaxrl_opt.config import implementations

    devices = jax.devices()
    payload = {**stamp(), "small": args.small, "budget_s": args.budget_s, "updates_timed": updates,
               "backend": implementations.backend(), "implementations": implementations.describe(args.conv_impl),
               "envs": args.envs, "algos": args.algos, "devices": [str(d) for d in devices], "device_kind": devices[0].device_kind,
               "num_devices": len(devices), "jax": jax.__version__, "python": platform.python_version(),
               "xla_flags": os.environ.get("XLA_FLAGS", ""), "host_cpus": os.cpu_count(),
               "load_avg": provenance.load_average(), "results": [], "skipped": [], "failed": []}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    env_cache: dict = {}
    for env_id, algo, lanes in plan(args.small, args.envs, args.algos, args.lanes):
        elapsed = time.perf_counter() - start
        if elapsed > args.budget_s:
            payload["skipped"].append({"env": env_id, "algo": algo, "lanes": lanes,
                                       "reason": f"budget: {elapsed:.0f} s > {args.budget_s:.0f} s"})
            continue
        try:
            record = measure(env_id, algo, lanes, updates, args.small, env_cache, args.conv_impl)
            payload["results"].append(record)
            print(f"{env_id:32s} {algo:5s} lanes {lanes:5d}: {record['env_steps_per_s']:>14,.0f} env steps/s "
                  f"(compile {record['compile_s']:.1f} s) [{time.perf_counter() - start:.0f} s]", flush=True)
        except Exception as err:  # noqa: BLE001  (an OOM at 1024 lanes must not lose the rest)
            payload["failed"].append({"env": env_id, "algo": algo, "lanes": lanes,
                                      "error": f"{type(err).__name__}: {err}"[:2000],
                                      "traceback": traceback.format_exc()[-4000:]})
            print(f"{env_id} {algo} lanes {lanes}: FAILED {type(err).__name__}: {str(err)[:300]}", flush=True)
        payload["elapsed_s"] = round(time.perf_counter() - start, 1)
        payload["load_avg_end"] = provenance.load_average()
        out.write_text(json.dumps(payload, indent=1) + "\n")
    payload["elapsed_s"] = round(time.perf_counter() - start, 1)
    out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {out}: {len(payload['results'])} measured, {len(payload['skipped'])} skipped, "
          f"{len(payload['failed'])} failed in {payload['elapsed_s']} s")
    if payload["failed"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
