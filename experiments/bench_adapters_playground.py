"""Throughput of the Playground/Brax adapter against the library's own raw stepping, one process.

For each env, three ``jit(scan(...))`` loops of ``--steps`` steps x ``--num-envs`` envs, each drawing
uniform actions inside the scan the same way and keeping every observation alive (summed):

- ``raw``:        ``vmap(raw_env.step)``: the library's env, no time limit, no reset;
- ``vmap_step``:  ``vmap(env.step)``: the adapter with gymnax's per-env auto-reset (a reset computed
                  every step, selected where an episode ended), the layer's default;
- ``step_batch``: ``env.step_batch``: the adapter's batch-level auto-reset (resets computed only on
                  steps where an episode ended).

Median of ``--repeats`` timed calls after one warm-up call (compile excluded, reported separately).

    python experiments/bench_adapters_playground.py --out experiments/results/bench_adapters_playground.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time

import jax

from purejaxrl_opt.envs import playground as pg


def loops(env, params, num_envs: int, num_steps: int):
    raw = env.raw_env
    dims = env.num_actions

    def _actions(key):
        return jax.random.uniform(key, (num_envs, dims), minval=-1.0, maxval=1.0)

    def run_raw(key):
        state = jax.vmap(raw.reset)(jax.random.split(key, num_envs))

        def _step(carry, key):
            state, total = carry
            state = jax.vmap(raw.step)(state, _actions(key))
            return (state, total + state.obs.sum()), None

        return jax.lax.scan(_step, (state, 0.0), jax.random.split(key, num_steps))[0][1]

    def make_adapter(step):
        def run(key):
            _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), params)

            def _step(carry, key):
                state, total = carry
                action_key, step_key = jax.random.split(key)
                obs, state, reward, terminated, truncated, info = step(
                    jax.random.split(step_key, num_envs), state, _actions(action_key), params)
                return (state, total + obs.sum() + info["final_observation"].sum()), None

            return jax.lax.scan(_step, (state, 0.0), jax.random.split(key, num_steps))[0][1]
        return run

    return {"raw": run_raw,
            "vmap_step": make_adapter(jax.vmap(env.step, in_axes=(0, 0, 0, None))),
            "step_batch": make_adapter(env.step_batch)}


def time_loop(fn, repeats: int):
    key = jax.random.PRNGKey(0)
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(key).compile()
    compile_s = time.perf_counter() - start
    jax.block_until_ready(compiled(key))
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(jax.random.PRNGKey(i + 1)))
        times.append(time.perf_counter() - start)
    return compile_s, statistics.median(times), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--envs", nargs="+", default=["playground/CartpoleBalance", "brax/inverted_pendulum"])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="experiments/results/bench_adapters_playground.json")
    args = parser.parse_args()
    results = []
    for env_id in args.envs:
        prefix, name = env_id.split("/", 1)
        env, params = pg.make(name, {}, prefix)
        row = {"env": env_id, "num_envs": args.num_envs, "steps": args.steps,
               "episode_limit": params.max_steps_in_episode}
        for label, fn in loops(env, params, args.num_envs, args.steps).items():
            compile_s, median_s, times = time_loop(fn, args.repeats)
            row[label] = {"compile_s": round(compile_s, 2), "median_s": round(median_s, 4),
                          "times_s": [round(t, 4) for t in times],
                          "env_steps_per_s": round(args.num_envs * args.steps / median_s)}
            print(env_id, label, row[label], flush=True)
        for label in ("vmap_step", "step_batch"):
            row[f"{label}_overhead_vs_raw"] = round(row[label]["median_s"] / row["raw"]["median_s"] - 1, 4)
        results.append(row)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    record = {"commit": commit, "jax": jax.__version__, "device": jax.devices()[0].device_kind,
              "cpu_count": os.cpu_count(), "load_avg_1m": os.getloadavg()[0], "python": platform.python_version(),
              "note": "loaded shared CPU: absolute numbers are indicative; the ratios are the point",
              "results": results}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
