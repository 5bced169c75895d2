"""``parallel.lane_loop``: a device's lanes vmapped (one batched program) or mapped (one lane after
another, ``lax.map``), time per update of the CLI's compiled update program, in one process.

    python experiments/bench_lane_loop.py                                   # Playground CartpoleSwingup
    python experiments/bench_lane_loop.py --env CartPole-v1 --envs 4 --out experiments/results/bench_lane_loop_cartpole.json

PPO with the config ``env=`` composes (for a Playground task, its tuned file or Playground's own
config mapped) at ``--envs`` envs, ``--seeds`` lanes, compiled with the CLI's device layout
(``--layout cli``: the lanes split over the host's devices, one per core) or on one device
(``--layout none``). Both lane loops are compiled first, then timed in turn for ``--repeats`` repeats
(vmap, map, vmap, map, ...), each repeat one execution of ``--block`` updates, blocked until done
(compile and first-use costs excluded by one untimed execution per mode). Writes ``--out`` with the
commit, the command and the load average: the median seconds per update of each mode, env steps/s,
and map's speed over vmap's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import purejaxrl_opt.train  # noqa: F401 - the CLI's XLA flags, set before JAX starts

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="playground/CartpoleSwingup")
    parser.add_argument("--envs", type=int, default=32, help="algo.num_envs")
    parser.add_argument("--seeds", type=int, default=4, help="lanes")
    parser.add_argument("--block", type=int, default=2, help="updates per timed execution")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layout", choices=["none", "cli"], default="cli")
    parser.add_argument("--modes", nargs="+", choices=["vmap", "map"], default=["vmap", "map"],
                        help="the lane loops to time (one alone: its speed only, e.g. under other XLA_FLAGS)")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results" / "bench_lane_loop.json"))
    args = parser.parse_args(argv)
    import provenance

    stamp = provenance.stamp()
    import jax
    import jax.numpy as jnp
    from bench_logging import compose
    from purejaxrl_opt.core import algos
    from purejaxrl_opt.host import parallel, runner, sweep
    from purejaxrl_opt.host.settings import parse_settings

    overrides = ["algo=ppo", f"env={args.env}", f"num_seeds={args.seeds}", f"algo.num_envs={args.envs}",
                 "logger=none"]
    run = parse_settings(compose(overrides)).run
    env = algos.make_env(run)
    algo = algos.make_algorithm(run, env)
    keys, hparams = sweep.lane_inputs(run, None)
    batch = run.algo.num_envs * run.algo.num_steps
    needed = args.block * (args.repeats + 1)
    if needed > algo.num_updates:
        raise SystemExit(f"--block x (--repeats + 1) = {needed} updates > the run's {algo.num_updates}")
    modes = {}
    for mode in args.modes:
        settings = parallel.ParallelConfig("auto" if args.layout == "cli" else "off", lane_loop=mode)
        layout = parallel.make_layout(settings, run, len(sweep.lanes(run, None)))
        start = time.perf_counter()
        compiled = runner.Compiled(algo, keys, hparams, layout)
        compile_s = time.perf_counter() - start
        placed = compiled.place_inputs(keys, hparams)
        loop = jax.block_until_ready(compiled.init(*placed))
        modes[mode] = {"compiled": compiled, "loop": loop, "done": 0, "compile_s": compile_s,
                       "layout": layout.describe(), "per_update_s": []}

    def execute(state):
        start = state["done"]
        state["loop"] = jax.block_until_ready(state["compiled"].updates(
            state["loop"], jnp.int32(start), jnp.int32(start + args.block)))
        state["done"] = start + args.block

    for state in modes.values():  # first-use costs, not counted
        execute(state)
    load_before = provenance.load_average()
    for _ in range(args.repeats):
        for mode, state in modes.items():
            start = time.perf_counter()
            execute(state)
            state["per_update_s"].append((time.perf_counter() - start) / args.block)
    results = {}
    for mode, state in modes.items():
        per_update = statistics.median(state["per_update_s"])
        results[mode] = {"seconds_per_update": per_update, "per_update_s": state["per_update_s"],
                         "env_steps_per_s": args.seeds * batch / per_update, "compile_s": state["compile_s"],
                         "layout": state["layout"]}
        print(f"[bench_lane_loop] {mode}: {per_update:.3f} s per update ({args.seeds} lanes x {batch} env steps), "
              f"{results[mode]['env_steps_per_s']:,.0f} env steps/s, compile {state['compile_s']:.1f} s", flush=True)
    speedup = None
    if set(results) == {"vmap", "map"}:
        speedup = results["vmap"]["seconds_per_update"] / results["map"]["seconds_per_update"]
        print(f"[bench_lane_loop] map over vmap: {speedup:.2f}x env steps/s", flush=True)
    out = {**stamp, "load_average_before": load_before, "load_average_after": provenance.load_average(),
           "cpu_count": os.cpu_count(), "xla_flags": os.environ.get("XLA_FLAGS", ""), "config": overrides, "env_steps_per_update_per_lane": batch,
           "block": args.block, "repeats": args.repeats, "modes": results, "map_over_vmap": speedup}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"[bench_lane_loop] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
