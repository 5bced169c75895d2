"""Craftax adapter vs the library's own raw stepping, at the same batch, in one process.

Every variant runs ``jit(scan(step))`` over ``--num-envs`` envs for ``--steps`` steps with uniformly random
actions (drawn inside the scan), keeping the observation alive (summed into the carry) so nothing is
dead-code eliminated:

  raw              the library's env without auto-reset (``make_craftax_env_from_name(name,
                   auto_reset=False)``): ``vmap(step_env)``; ended episodes just keep stepping, no
                   world is ever generated (the floor: no reset at all)
  baselines        what Craftax_Baselines' ``ppo.py`` steps: its ``OptimisticResetVecEnvWrapper``
                   (imported from a checkout of MichaelTMatthews/Craftax_Baselines, ``--baselines``,
                   unmodified) over the library's env without auto-reset, reset ratio 16: 4 worlds
                   generated on every step, a random choice of the ended envs, a gather and a select
                   (its ``LogWrapper`` is left out: it only sums returns)
  raw_autoreset    the library's auto-reset env (``auto_reset=True``): ``vmap(step)``, which generates
                   a world for every env on every step and selects it where ``done``
  adapter          the adapter's ``step_batch`` (optimistic reset, ``reset_ratio`` 16: 4 worlds per
                   step at 64 envs, none on steps where no episode ended)
  adapter_per_env  ``vmap(adapter.step)``: gymnax's per-env auto-reset (a world per env per step), what
                   the project's rollouts would do without ``step_batch``

The like-for-like figure is ``adapter`` against ``baselines`` (both an optimistic reset at the same
ratio); ``adapter`` against ``raw`` is the cost of resetting at all. Where the time goes is measured
piecewise too (``--parts``): the 4 pool worlds alone and the gather + select over the whole state
alone, each its own jitted scan of ``--steps`` iterations (the library's step alone is ``raw``).

Timings are ``--repeats`` interleaved rounds (the fastest; a shared machine's slow spells hit every variant
alike). Writes experiments/results/bench_adapters_craftax.json.

    python experiments/bench_adapters_craftax.py                      # Classic symbolic, 64 envs
    python experiments/bench_adapters_craftax.py --baselines /path/to/Craftax_Baselines
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path


from purejaxrl_opt.host.xla_flags import set_default_xla_flags  # noqa: E402  (before JAX starts its backend)

set_default_xla_flags()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from craftax.craftax_env import make_craftax_env_from_name  # noqa: E402

from purejaxrl_opt.envs import craftax as craftax_adapter  # noqa: E402

import provenance


def variants(name: str, num_envs: int, baselines: str | None):
    """name -> (reset_fn(keys [N]) -> state, batch_step(keys [N], state, action [N]) -> (obs, state, done))."""
    raw = make_craftax_env_from_name(name, auto_reset=False)
    auto = make_craftax_env_from_name(name, auto_reset=True)
    env, params = craftax_adapter.make(name, {})
    raw_params = raw.default_params

    def raw_reset(keys):
        return jax.vmap(raw.reset_env, in_axes=(0, None))(keys, raw_params)[1]

    def raw_step(keys, state, action):
        obs, state, _, done, _ = jax.vmap(raw.step_env, in_axes=(0, 0, 0, None))(keys, state, action, raw_params)
        return obs, state, done

    def auto_step(keys, state, action):
        obs, state, _, done, _ = jax.vmap(auto.step, in_axes=(0, 0, 0, None))(keys, state, action, raw_params)
        return obs, state, done

    def adapter_reset(keys):
        return jax.vmap(env.reset, in_axes=(0, None))(keys, params)[1]

    def adapter_step(keys, state, action):
        obs, state, _, terminated, truncated, _ = env.step_batch(keys, state, action, params)
        return obs, state, terminated | truncated

    def adapter_per_env(keys, state, action):
        obs, state, _, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            keys, state, action, params)
        return obs, state, terminated | truncated

    table = {"raw": (raw_reset, raw_step), "raw_autoreset": (raw_reset, auto_step),
             "adapter": (adapter_reset, adapter_step), "adapter_per_env": (adapter_reset, adapter_per_env)}
    if baselines:
        sys.path.insert(0, baselines)
        from wrappers import OptimisticResetVecEnvWrapper  # Craftax_Baselines' own, unmodified

        vec = OptimisticResetVecEnvWrapper(raw, num_envs=num_envs,
                                           reset_ratio=min(craftax_adapter.DEFAULT_RESET_RATIO, num_envs))

        def baselines_step(keys, state, action):
            # the wrapper splits one key itself, as ppo.py calls it
            obs, state, _, done, _ = vec.step(keys[0], state, action, raw_params)
            return obs, state, done

        table["baselines"] = (raw_reset, baselines_step)
    return table, env, raw


def parts(env, raw, num_envs: int, num_steps: int, num_actions: int):
    """Where a step's time goes: name -> (jitted fn(key, state) -> something to block on, its input).

    (the library's batch step alone is the ``raw`` variant) ``pool_worlds``: ``num_steps`` x the pool's worlds (``env.num_resets(N)`` resets), alone;
    ``gather_select``: ``num_steps`` x gathering the pool into ``N`` rows and selecting it into the
    batch state (every leaf), alone."""
    params = raw.default_params
    adapter_params = craftax_adapter.make(env.name, {})[1]
    num_resets = env.num_resets(num_envs)
    keys = jax.random.split(jax.random.PRNGKey(0), num_envs)
    strong = lambda tree: jax.tree.map(lambda x: jnp.asarray(x, dtype=x.dtype), tree)  # noqa: E731 (no weak types)
    state = strong(jax.vmap(raw.reset_env, in_axes=(0, None))(keys, params)[1])
    pool = strong(jax.vmap(raw.reset_env, in_axes=(0, None))(keys[:num_resets], params))

    @jax.jit
    def pool_worlds(key, state):
        def _worlds(total, k):
            obs, _ = jax.vmap(env.reset_env, in_axes=(0, None))(jax.random.split(k, num_resets),
                                                                 adapter_params)
            return total + obs.sum(), None
        return jax.lax.scan(_worlds, jnp.zeros(()), jax.random.split(key, num_steps))[0]

    @jax.jit
    def gather_select(key, state):
        def _select(state, k):
            done = jax.random.bernoulli(k, 0.05, (num_envs,))
            index = jnp.where(done, (jnp.cumsum(done) - 1) % num_resets, 0)

            def _leaf(p, s):
                cond = done.reshape(done.shape + (1,) * (s.ndim - 1))
                return jnp.where(cond, p[index], s)
            return jax.tree.map(_leaf, pool[1], state), None
        return jax.lax.scan(_select, state, jax.random.split(key, num_steps))[0]

    return {"pool_worlds": (pool_worlds, state), "gather_select": (gather_select, state)}


def build(reset_fn, step_fn, num_envs: int, num_steps: int, num_actions: int):
    @jax.jit
    def rollout(key, state):
        def _step(carry, step_key):
            state, obs_sum, ends = carry
            action_key, env_key = jax.random.split(step_key)
            action = jax.random.randint(action_key, (num_envs,), 0, num_actions)
            obs, state, done = step_fn(jax.random.split(env_key, num_envs), state, action)
            return (state, obs_sum + obs.sum(), ends + done.sum()), None

        carry, _ = jax.lax.scan(_step, (state, jnp.zeros(()), jnp.zeros((), jnp.int32)),
                                jax.random.split(key, num_steps))
        return carry

    state = jax.jit(reset_fn)(jax.random.split(jax.random.PRNGKey(0), num_envs))
    return rollout, state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Craftax-Classic-Symbolic-v1")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", default="raw,baselines,adapter",
                        help="comma-separated subset of raw,baselines,adapter,raw_autoreset,adapter_per_env "
                             "(raw and adapter are needed; baselines for the like-for-like ratio)")
    parser.add_argument("--baselines", default="/work/peers/Craftax_Baselines",
                        help="a checkout of MichaelTMatthews/Craftax_Baselines (its wrappers.py)")
    parser.add_argument("--parts", action=argparse.BooleanOptionalAction, default=True,
                        help="also time the pieces of a step alone (pool worlds, gather+select)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "bench_adapters_craftax.json"))
    args = parser.parse_args()
    load_at_start = provenance.load_average()
    commit = provenance.commit()

    names = args.variants.split(",")
    table, env, raw = variants(args.env, args.num_envs, args.baselines if "baselines" in names else None)
    table = {name: table[name] for name in names}
    compiled, compile_s = {}, {}
    for name, (reset_fn, step_fn) in table.items():
        start = time.perf_counter()
        rollout, state = build(reset_fn, step_fn, args.num_envs, args.steps, env.num_actions)
        # compile + warm up; twice: the reset state's python-scalar leaves are weakly typed, the
        # rollout's output state is not, and jit compiles a second program for it
        state = jax.block_until_ready(rollout(jax.random.PRNGKey(1), state)[0])
        state = jax.block_until_ready(rollout(jax.random.PRNGKey(1), state)[0])
        compile_s[name] = time.perf_counter() - start
        compiled[name] = (rollout, state)
        print(f"{name}: compiled + first run {compile_s[name]:.1f} s", flush=True)
    part_fns = parts(env, raw, args.num_envs, args.steps, env.num_actions) if args.parts else {}
    for name, (fn, state) in part_fns.items():
        start = time.perf_counter()
        jax.block_until_ready(fn(jax.random.PRNGKey(1), state))
        compile_s[name] = time.perf_counter() - start
        print(f"{name}: compiled + first run {compile_s[name]:.1f} s", flush=True)
    seconds = {name: [] for name in list(table) + list(part_fns)}
    ends = {name: 0 for name in table}
    for round_index in range(args.repeats):
        for name, (rollout, state) in compiled.items():
            start = time.perf_counter()
            carry = jax.block_until_ready(rollout(jax.random.PRNGKey(2 + round_index), state))
            seconds[name].append(time.perf_counter() - start)
            ends[name] += int(carry[2])
        for name, (fn, state) in part_fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(jax.random.PRNGKey(2 + round_index), state))
            seconds[name].append(time.perf_counter() - start)
        print(f"round {round_index}: " + ", ".join(f"{n} {seconds[n][-1]:.2f} s" for n in seconds), flush=True)
    env_steps = args.num_envs * args.steps
    rate = {name: env_steps / min(seconds[name]) for name in table}
    per_step_ms = {name: 1e3 * min(s) / args.steps for name, s in seconds.items()}
    result = {
        "env": args.env, "num_envs": args.num_envs, "steps_per_call": args.steps, "repeats": args.repeats,
        "reset_ratio": craftax_adapter.DEFAULT_RESET_RATIO, "worlds_per_step": env.num_resets(args.num_envs),
        "env_steps_per_s": rate, "ms_per_batch_step": per_step_ms, "seconds": seconds,
        "compile_and_first_run_s": compile_s,
        "episode_ends_per_step": {n: ends[n] / (args.repeats * args.steps) for n in table},
        "adapter_cost_over_raw": rate["raw"] / rate["adapter"] - 1.0,
        "adapter_cost_over_baselines": (rate["baselines"] / rate["adapter"] - 1.0
                                        if "baselines" in rate else None),
        "baselines_cost_over_raw": (rate["raw"] / rate["baselines"] - 1.0 if "baselines" in rate else None),
        "adapter_speedup_over_raw_autoreset": (rate["adapter"] / rate["raw_autoreset"]
                                               if "raw_autoreset" in rate else None),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_avg_at_start": load_at_start, "load_avg_at_end": provenance.load_average(),
                    "jax": jax.__version__},
        "commit": commit,
        "command": "python experiments/bench_adapters_craftax.py " + " ".join(sys.argv[1:]),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for name in table:
        print(f"{name:16s} {rate[name]:10.0f} env steps/s  {per_step_ms[name]:7.2f} ms per batch step")
    for name in part_fns:
        print(f"{name:16s} {'':10s}               {per_step_ms[name]:7.2f} ms per batch step")
    print(f"adapter cost over raw: {100 * result['adapter_cost_over_raw']:+.1f}%")
    if result["adapter_cost_over_baselines"] is not None:
        print(f"adapter cost over Craftax_Baselines' optimistic reset: "
              f"{100 * result['adapter_cost_over_baselines']:+.1f}%  (goal <= +10%)")


if __name__ == "__main__":
    main()
