"""Craftax adapter vs the library's own raw stepping, at the same batch, in one process.

Every variant runs ``jit(scan(step))`` over ``--num-envs`` envs for ``--steps`` steps with uniformly random
actions (drawn inside the scan), keeping the observation alive (summed into the carry) so nothing is
dead-code eliminated:

  raw              the library's env without auto-reset (``make_craftax_env_from_name(name,
                   auto_reset=False)``): ``vmap(step_env)``; ended episodes just keep stepping, no
                   world is ever generated (the floor: no reset at all)
  raw_autoreset    the library's auto-reset env (``auto_reset=True``): ``vmap(step)``, which generates
                   a world for every env on every step and selects it where ``done``
  adapter          the adapter's ``step_batch`` (optimistic reset, ``reset_ratio`` 16: 4 worlds per
                   step at 64 envs, none on steps where no episode ended)
  adapter_per_env  ``vmap(adapter.step)``: gymnax's per-env auto-reset (a world per env per step), what
                   the project's rollouts would do without ``step_batch``

Timings are ``--repeats`` interleaved rounds (the fastest; a shared machine's slow spells hit every variant
alike). Writes experiments/results/bench_adapters_craftax.json.

    python experiments/bench_adapters_craftax.py                      # Classic symbolic, 64 envs
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from purejaxrl_opt.xla_flags import set_default_xla_flags  # noqa: E402  (before JAX starts its backend)

set_default_xla_flags()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from craftax.craftax_env import make_craftax_env_from_name  # noqa: E402

from purejaxrl_opt.envs import craftax as craftax_adapter  # noqa: E402


def variants(name: str, num_envs: int):
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

    return {"raw": (raw_reset, raw_step), "raw_autoreset": (raw_reset, auto_step),
            "adapter": (adapter_reset, adapter_step), "adapter_per_env": (adapter_reset, adapter_per_env)}, env


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
    parser.add_argument("--variants", default="raw,raw_autoreset,adapter,adapter_per_env",
                        help="comma-separated subset to time (raw and adapter are needed for the ratio)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "bench_adapters_craftax.json"))
    args = parser.parse_args()

    table, env = variants(args.env, args.num_envs)
    table = {name: table[name] for name in args.variants.split(",")}
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
    seconds = {name: [] for name in table}
    ends = {name: 0 for name in table}
    for round_index in range(args.repeats):
        for name, (rollout, state) in compiled.items():
            start = time.perf_counter()
            carry = jax.block_until_ready(rollout(jax.random.PRNGKey(2 + round_index), state))
            seconds[name].append(time.perf_counter() - start)
            ends[name] += int(carry[2])
        print(f"round {round_index}: " + ", ".join(f"{n} {seconds[n][-1]:.2f} s" for n in table), flush=True)
    env_steps = args.num_envs * args.steps
    rate = {name: env_steps / min(s) for name, s in seconds.items()}
    result = {
        "env": args.env, "num_envs": args.num_envs, "steps_per_call": args.steps, "repeats": args.repeats,
        "reset_ratio": craftax_adapter.DEFAULT_RESET_RATIO, "worlds_per_step": env.num_resets(args.num_envs),
        "env_steps_per_s": rate, "seconds": seconds, "compile_and_first_run_s": compile_s,
        "episode_ends_per_step": {n: ends[n] / (args.repeats * args.steps) for n in table},
        "adapter_cost_over_raw": rate["raw"] / rate["adapter"] - 1.0,
        "adapter_speedup_over_raw_autoreset": (rate["adapter"] / rate["raw_autoreset"]
                                               if "raw_autoreset" in rate else None),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_avg_at_end": os.getloadavg(), "jax": jax.__version__},
        "command": "python experiments/bench_adapters_craftax.py " + " ".join(sys.argv[1:]),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for name in table:
        print(f"{name:16s} {rate[name]:10.0f} env steps/s")
    print(f"adapter cost over raw: {100 * result['adapter_cost_over_raw']:+.1f}%  (goal <= +10%)")


if __name__ == "__main__":
    main()
