"""Throughput of the Playground/Brax adapter against the library's own raw stepping, one process.

For each env, three ``jit(scan(...))`` loops of ``--steps`` steps x ``--num-envs`` envs, each drawing
uniform actions inside the scan the same way and keeping every observation alive (summed):

- ``raw``:        ``vmap(raw_env.step)``: the library's env, no time limit, no reset (a floor: episodes
                  run past their end, no start state is ever computed again);
- ``library_autoreset``: what the library's own PPO steps with: Playground's ``wrap_for_brax_training``
                  (playground ids) or ``brax.envs.wrappers.training.wrap`` (brax ids), i.e.
                  ``EpisodeWrapper`` + ``AutoResetWrapper`` + ``VmapWrapper`` at the same episode limit;
                  its auto-reset swaps in the env's *first* start state kept from ``reset`` (no new
                  start is computed, and the last observation of an episode is lost);
- ``vmap_step``:  ``vmap(env.step)``: the adapter with gymnax's per-env auto-reset (a reset computed
                  every step, selected where an episode ended), the layer's default;
- ``step_batch``: ``env.step_batch``: the adapter's batch-level auto-reset (resets computed only on
                  steps where an episode ended).

All loops are compiled first, then timed in ``--repeats`` interleaved rounds (round-robin, so a load
change on a shared machine hits every loop alike); medians and minima of the rounds, compile excluded
(reported separately). The overheads are against ``library_autoreset`` (what a user of the library
steps with) and against ``raw`` (the floor).

    python experiments/bench_adapters_playground.py --out experiments/results/bench_adapters_playground.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import jax

from purejaxrl_opt.envs import playground as pg

import provenance


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

    def run_library(key):
        wrapped = library_wrapped(env, params)
        state = wrapped.reset(jax.random.split(key, num_envs))

        def _step(carry, key):
            state, total = carry
            state = wrapped.step(state, _actions(key))
            return (state, total + state.obs.sum()), None

        return jax.lax.scan(_step, (state, 0.0), jax.random.split(key, num_steps))[0][1]

    return {"raw": run_raw, "library_autoreset": run_library,
            "vmap_step": make_adapter(jax.vmap(env.step, in_axes=(0, 0, 0, None))),
            "step_batch": make_adapter(env.step_batch)}


def library_wrapped(env, params):
    """The library's own training wrappers around the same raw env, same episode limit, batched."""
    limit = int(params.max_steps_in_episode) * env.action_repeat  # the wrappers count library steps
    if env.name.startswith("brax/"):
        from brax.envs.wrappers import training
        return training.wrap(env.raw_env, episode_length=limit, action_repeat=env.action_repeat)
    from mujoco_playground._src import wrapper
    return wrapper.wrap_for_brax_training(env.raw_env, episode_length=limit, action_repeat=env.action_repeat)


def compile_loop(fn):
    key = jax.random.PRNGKey(0)
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(key).compile()
    compile_s = time.perf_counter() - start
    jax.block_until_ready(compiled(key))
    return compiled, compile_s


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
        compiled = {}
        for label, fn in loops(env, params, args.num_envs, args.steps).items():
            compiled[label] = compile_loop(fn)
            print(env_id, label, f"compiled in {compiled[label][1]:.1f} s", flush=True)
        times = {label: [] for label in compiled}
        for i in range(args.repeats):
            for label, (fn, _) in compiled.items():
                start = time.perf_counter()
                jax.block_until_ready(fn(jax.random.PRNGKey(i + 1)))
                times[label].append(time.perf_counter() - start)
        for label, (_, compile_s) in compiled.items():
            median_s = statistics.median(times[label])
            row[label] = {"compile_s": round(compile_s, 2), "median_s": round(median_s, 4),
                          "min_s": round(min(times[label]), 4), "times_s": [round(t, 4) for t in times[label]],
                          "env_steps_per_s": round(args.num_envs * args.steps / median_s)}
            print(env_id, label, row[label], flush=True)
        for label in ("vmap_step", "step_batch"):
            for ref in ("raw", "library_autoreset"):
                row[f"{label}_overhead_vs_{ref}"] = round(row[label]["median_s"] / row[ref]["median_s"] - 1, 4)
                row[f"{label}_overhead_vs_{ref}_min"] = round(row[label]["min_s"] / row[ref]["min_s"] - 1, 4)
        results.append(row)
    commit = provenance.commit()
    record = {"commit": commit, "jax": jax.__version__, "device": jax.devices()[0].device_kind,
              "cpu_count": os.cpu_count(), "load_avg_1m": provenance.load_average()[0], "python": platform.python_version(),
              "load_avg_at_end": provenance.load_average(),
              "command": "python experiments/bench_adapters_playground.py " + " ".join(sys.argv[1:]),
              "note": "shared CPU: absolute numbers are indicative; the ratios (interleaved rounds) are the point",
              "results": results}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
