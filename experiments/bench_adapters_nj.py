"""Adapter overhead: ``jit(scan(vmap(step)))`` of the library's own stepping against the adapter's
``env.step`` (gymnax 1.x, auto-reset with the pre-reset observation) at the same batch, in one process.

For each env three stepping loops, random actions, the observation kept alive (summed into the carry):
* ``library_autoreset``: the library's own auto-resetting step (navix ``env.step``; jumanji
  ``AutoResetWrapper``; xminigrid ``GymAutoResetWrapper``), what its users step with;
* ``library_raw``: the library's step without any reset (navix ``_step``; jumanji and xminigrid
  ``env.step``):
  episodes run past their end, a lower bound;
* ``adapter``: ``purejaxrl_opt.envs.step_batch`` of the adapter, what the rollouts step with (the
  adapter's own batch-level reset where it has one, e.g. jumanji's resets only on steps where an
  episode ended; else ``jax.vmap(env.step)``).
The loops alternate (round-robin) so load changes hit all three alike; steps/s and the overhead use
the best (minimum) time of the repeats, the least disturbed on a shared machine (medians are in the
JSON too). Overhead = adapter time / library_autoreset time - 1.

    python experiments/bench_adapters_nj.py [--num-envs 64] [--num-steps 512] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from purejaxrl_opt.envs import step_batch


def _loop(step_fn, init_fn, num_envs: int, num_steps: int, num_actions: int):
    """``jit(key -> checksum)``: reset ``num_envs`` envs, then ``num_steps`` vmapped steps."""

    @jax.jit
    def run(key):
        reset_key, key = jax.random.split(key)
        state = init_fn(jax.random.split(reset_key, num_envs))

        def _step(carry, step_key):
            state, total = carry
            action_key, env_key = jax.random.split(step_key)
            action = jax.random.randint(action_key, (num_envs,), 0, num_actions)
            state, obs, reward = step_fn(jax.random.split(env_key, num_envs), state, action)
            return (state, total + jnp.sum(obs.astype(jnp.float32)) + jnp.sum(reward)), None

        return jax.lax.scan(_step, (state, jnp.zeros(())), jax.random.split(key, num_steps))[0][1]

    return run


def navix_loops(name: str, num_envs: int, num_steps: int):
    import navix

    from purejaxrl_opt.envs import navix as adapter

    nx_env = navix.make(name, max_steps=100)
    env, params = adapter.make(name, {"max_steps_in_episode": 100})
    n = env.num_actions

    def lib(step):
        def fn(keys, ts, action):
            ts = jax.vmap(step)(ts, action)
            return ts, ts.observation, ts.reward
        return _loop(fn, jax.vmap(nx_env.reset), num_envs, num_steps, n)

    def adapted(keys, state, action):
        obs, state, reward, *_ = step_batch(env, params, keys, state, action)
        return state, obs, reward

    init = lambda keys: jax.vmap(env.reset, in_axes=(0, None))(keys, params)[1]  # noqa: E731
    return {"library_autoreset": lib(nx_env.step), "library_raw": lib(nx_env._step),
            "adapter": _loop(adapted, init, num_envs, num_steps, n)}


def jumanji_loops(name: str, num_envs: int, num_steps: int):
    import jumanji
    from jumanji.wrappers import AutoResetWrapper

    from purejaxrl_opt.envs import jumanji as adapter

    env, params = adapter.make(name, {})
    lib_env = jumanji.make(name)
    wrapped = AutoResetWrapper(lib_env, next_obs_in_extras=True)
    n = env.num_actions

    def lib(library_env, keep):
        def fn(keys, state, action):
            state, ts = jax.vmap(library_env.step)(state, action)
            return state, keep(ts.observation), ts.reward
        init = lambda keys: jax.vmap(library_env.reset)(keys)[0]  # noqa: E731
        return _loop(fn, init, num_envs, num_steps, n)

    # the library's observation structure kept alive leaf by leaf (no encoding: that is the adapter's)
    def keep(observation):
        return sum(jnp.sum(jnp.asarray(leaf, jnp.float32)) for leaf in jax.tree_util.tree_leaves(observation))

    def adapted(keys, state, action):
        obs, state, reward, *_ = step_batch(env, params, keys, state, action)
        return state, obs, reward

    init = lambda keys: jax.vmap(env.reset, in_axes=(0, None))(keys, params)[1]  # noqa: E731
    return {"library_autoreset": lib(wrapped, keep), "library_raw": lib(lib_env, keep),
            "adapter": _loop(adapted, init, num_envs, num_steps, n)}


def xminigrid_loops(name: str, num_envs: int, num_steps: int):
    import xminigrid
    from xminigrid.wrappers import GymAutoResetWrapper

    from purejaxrl_opt.envs import xminigrid as adapter

    env, params = adapter.make(name, {})
    xm_env, xm_params = xminigrid.make(name)
    n = env.num_actions

    def lib(library_env):
        def fn(keys, timestep, action):
            timestep = jax.vmap(library_env.step, in_axes=(None, 0, 0))(xm_params, timestep, action)
            return timestep, timestep.observation, timestep.reward
        init = lambda keys: jax.vmap(library_env.reset, in_axes=(None, 0))(xm_params, keys)  # noqa: E731
        return _loop(fn, init, num_envs, num_steps, n)

    def adapted(keys, state, action):
        obs, state, reward, *_ = step_batch(env, params, keys, state, action)
        return state, obs, reward

    init = lambda keys: jax.vmap(env.reset, in_axes=(0, None))(keys, params)[1]  # noqa: E731
    return {"library_autoreset": lib(GymAutoResetWrapper(xm_env)), "library_raw": lib(xm_env),
            "adapter": _loop(adapted, init, num_envs, num_steps, n)}


def bench(loops: dict, repeats: int, steps: int) -> dict:
    compile_s = {}
    for name, fn in loops.items():
        start = time.perf_counter()
        jax.block_until_ready(fn(jax.random.PRNGKey(0)))
        compile_s[name] = round(time.perf_counter() - start, 2)
    times = {name: [] for name in loops}
    for r in range(repeats):
        for name, fn in loops.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(jax.random.PRNGKey(r + 1)))
            times[name].append(time.perf_counter() - start)
    out = {name: {"min_s": float(np.min(t)), "median_s": float(np.median(t)),
                  "steps_per_s": float(steps / np.min(t)), "first_call_s": compile_s[name],
                  "times_s": [round(x, 4) for x in t]}
           for name, t in times.items()}
    # best of the repeats: on a shared machine the minimum is the least disturbed measurement
    out["overhead_vs_library_autoreset"] = out["adapter"]["min_s"] / out["library_autoreset"]["min_s"] - 1
    out["overhead_vs_library_autoreset_median"] = (out["adapter"]["median_s"]
                                                   / out["library_autoreset"]["median_s"] - 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--num-steps", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--envs", nargs="*", default=None, help="a subset of the envs (default: all)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "bench_adapters_nj.json"))
    args = parser.parse_args()
    steps = args.num_envs * args.num_steps
    import provenance

    results = {"commit": provenance.commit(), "num_envs": args.num_envs, "num_steps": args.num_steps, "repeats": args.repeats,
               "jax": jax.__version__, "device": str(jax.devices()[0]), "host": platform.node(),
               "command": f"python experiments/bench_adapters_nj.py --num-envs {args.num_envs} "
                          f"--num-steps {args.num_steps} --repeats {args.repeats}"
                          + (f" --envs {' '.join(args.envs)}" if args.envs else ""), "envs": {}}
    for label, make in [("navix/Navix-Empty-8x8-v0", lambda: navix_loops("Navix-Empty-8x8-v0", args.num_envs,
                                                                            args.num_steps)),
                        ("navix/Navix-DoorKey-5x5-v0", lambda: navix_loops("Navix-DoorKey-5x5-v0", args.num_envs,
                                                                              args.num_steps)),
                        ("jumanji/Snake-v1", lambda: jumanji_loops("Snake-v1", args.num_envs, args.num_steps)),
                        ("jumanji/Game2048-v1", lambda: jumanji_loops("Game2048-v1", args.num_envs,
                                                                        args.num_steps)),
                        ("xminigrid/MiniGrid-Empty-6x6", lambda: xminigrid_loops("MiniGrid-Empty-6x6", args.num_envs,
                                                                                 args.num_steps)),
                        ("xminigrid/MiniGrid-DoorKey-8x8", lambda: xminigrid_loops("MiniGrid-DoorKey-8x8",
                                                                                   args.num_envs, args.num_steps))]:
        if args.envs and label not in args.envs:
            continue
        results["envs"][label] = bench(make(), args.repeats, steps)
        r = results["envs"][label]
        print(f"{label}: library (auto-reset) {r['library_autoreset']['steps_per_s']:,.0f} steps/s, raw "
              f"{r['library_raw']['steps_per_s']:,.0f}, adapter {r['adapter']['steps_per_s']:,.0f}; overhead "
              f"{100 * r['overhead_vs_library_autoreset']:+.1f}%", flush=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
