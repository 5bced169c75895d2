"""Throughput benchmark: training vs. the env-stepping and acting limits, measured in one process.

For one env and batch shape it measures env steps/s of
  (a) raw env stepping with random actions (auto-reset, vmapped envs, jitted scan),
  (b) acting only: the rollout of training itself (actor forward + sampling + log-probs + env step +
      episode stats + the stored batch of transitions, all of which training uses),
  (c) full training with the given algorithm(s) (rollout + GAE + updates + metrics),
each timed over the same number of env steps after compiling, in ``--repeats`` interleaved rounds
(median per measurement), and prints and writes (JSON) the rates and the ratios c/a and c/b. Ratios
are what to compare across machines. Also: (b0) acting whose batch is thrown away (XLA then drops the
stored transitions and log-probs: no training runs that loop), (b') acting with a critic forward per
step (what most JAX PPO code does), and with ``--data N`` training data parallel over N devices.

    python experiments/bench_throughput.py --env CartPole-v1 --num-envs 4 1024 --algos ppo trpo
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path


def _host_devices_from_argv() -> None:
    """``--data N`` on a CPU host: expose N host devices (before JAX initialises its backend)."""
    if "--data" in sys.argv:
        n = int(sys.argv[sys.argv.index("--data") + 1])
        flags = os.environ.get("XLA_FLAGS", "")
        if n > 1 and "xla_force_host_platform_device_count" not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()


_host_devices_from_argv()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from purejaxrl_opt import algos, envs, rollout  # noqa: E402
from purejaxrl_opt.algos.base import init_loop, run_updates  # noqa: E402
from purejaxrl_opt.config import ALGO_CONFIGS, EnvConfig, RunConfig  # noqa: E402
from purejaxrl_opt.networks import Critic  # noqa: E402
from purejaxrl_opt.sweep import lane_inputs, lane_keys  # noqa: E402


def _interleaved_rates(fns: dict, repeats: int) -> dict:
    """Env steps/s of each blocking ``fn() -> env steps`` in ``fns``: one warm-up each, then
    ``repeats`` rounds that time every fn once (a, b, c, a, b, c, ...), median per fn. Interleaving
    makes slow spells of a shared machine hit every measurement alike, so the ratios hold."""
    for fn in fns.values():
        fn()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            steps = fn()
            samples[name].append(steps / (time.perf_counter() - start))
    return {name: statistics.median(rates) for name, rates in samples.items()}


def _batch_checksum(batch) -> jnp.ndarray:
    """A scalar that depends on every field of a rollout batch (keeps all of it in the program)."""
    return sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree_util.tree_leaves(batch))


def data_parallel_fn(run: RunConfig, env_tuple, keys, data: int):
    """A blocking callable that trains one agent data parallel over ``data`` local devices (the
    runner's shard_map path: envs split over the devices, gradients pmean-ed every minibatch) and
    returns the env steps it ran."""
    from purejaxrl_opt import parallel
    from purejaxrl_opt.runner import Compiled

    algo = algos.make_algorithm(run, env_tuple)
    data_algo = algos.make_algorithm(run, env_tuple, axis_name=parallel.DATA)
    layout = parallel.make_layout(parallel.ParallelSettings(lanes="off", data=data), run, keys.shape[0],
                                  devices=jax.local_devices()[:data])
    hparams = lane_inputs(dataclasses.replace(run, num_seeds=keys.shape[0]))[1]
    compiled = Compiled(algo, keys, hparams, layout, data_algo)
    keys, hparams = compiled.place_inputs(keys, hparams)
    start_loop = compiled.init(keys, hparams)

    def _train():
        loop = compiled.updates(start_loop, jnp.int32(0), jnp.int32(algo.num_updates))
        return float(jax.device_get(loop.env_steps).sum())

    return _train


def bench_shape(env_id: str, num_envs: int, num_steps: int, num_updates: int, lanes: int,
                algo_names: list[str], repeats: int, data: int = 1) -> dict:
    env, env_params, spec = envs.make(env_id)
    steps = lanes * num_envs * num_steps * num_updates
    keys = lane_keys(range(lanes))
    result = {"env": env_id, "num_envs": num_envs, "num_steps": num_steps, "num_updates": num_updates,
              "lanes": lanes, "env_steps_per_measure": steps}

    # (a) random actions
    def _random(key):
        carry = rollout.reset_carry(env, env_params, key, num_envs)
        step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
        sample = jax.vmap(env.action_space(env_params).sample)

        def _body(carry, step_key):
            env_state, obs = carry
            action_key, env_key = jax.random.split(step_key)
            action = sample(jax.random.split(action_key, num_envs))
            obs, env_state, reward, *_ = step(jax.random.split(env_key, num_envs), env_state, action,
                                              env_params)
            return (env_state, obs), reward.sum()

        _, rewards = jax.lax.scan(_body, (carry.env_state, carry.obs),
                                  jax.random.split(key, num_steps * num_updates))
        return rewards.sum()

    random_fn = jax.jit(jax.vmap(_random))
    def _blocking(fn, *args):
        return lambda: (jax.block_until_ready(fn(*args)), steps)[1]

    fns = {"random": _blocking(random_fn, keys)}

    # (b) acting only: the training rollout without any learning
    run = RunConfig(algo=ALGO_CONFIGS["ppo"](num_envs=num_envs, num_steps=num_steps),
                    env=EnvConfig(id=env_id), total_timesteps=num_envs * num_steps * num_updates)
    ppo = algos.make_algorithm(run, (env, env_params, spec))
    hparams = lane_inputs(dataclasses.replace(run, num_seeds=lanes))[1]
    loops = jax.jit(jax.vmap(partial(init_loop, ppo)))(keys, hparams)

    def _act(loop, use_batch: bool):
        state = loop.algo_state

        def _body(carry, key):
            carry, batch, stats = rollout.collect(env, env_params, spec, ppo.dist, ppo.policy.apply,
                                                  state.params["actor"], state.obs_norm, carry, key,
                                                  num_steps)
            # (b) uses every field of the batch, as training does; (b0) only the episode
            # statistics, so XLA drops the log-probs and the stored transitions: a loop no training
            # runs, reported to show what storing the batch costs
            return carry, stats.return_sum + (_batch_checksum(batch) if use_batch else 0.0)

        _, sums = jax.lax.scan(_body, state.env, jax.random.split(state.key, num_updates))
        return sums.sum()

    act_fn = jax.jit(jax.vmap(partial(_act, use_batch=True)))
    act_lean_fn = jax.jit(jax.vmap(partial(_act, use_batch=False)))
    fns["acting"] = _blocking(act_fn, loops)
    fns["acting_unused"] = _blocking(act_lean_fn, loops)

    # (b') acting as most JAX PPO code does it: actor *and* critic forward every env step. Not what
    # our rollout does (values are computed once per batch afterwards); reported only so that our
    # ratios can be compared with figures quoted against that baseline.
    def _act_with_critic(loop):
        state = loop.algo_state
        critic = Critic(spec, run.network)

        def _actor_and_critic(params, obs):
            return {**ppo.policy.apply(params["actor"], obs),
                    "_": critic.apply(params["critic"], obs)}

        class _Dist:  # samples from the actor's output, ignores the value
            def sample(self, key, p):
                return ppo.dist.sample(key, {k: v for k, v in p.items() if k != "_"})

            def log_prob(self, p, a):
                return ppo.dist.log_prob({k: v for k, v in p.items() if k != "_"}, a) + 0 * p["_"]

        def _body(carry, key):
            carry, batch, stats = rollout.collect(env, env_params, spec, _Dist(), _actor_and_critic,
                                                  state.params, state.obs_norm, carry, key, num_steps)
            # the log-probs carry 0 * value: using them keeps the critic's forward in the program
            return carry, stats.return_sum + _batch_checksum(batch)

        _, sums = jax.lax.scan(_body, state.env, jax.random.split(state.key, num_updates))
        return sums.sum()

    act_critic_fn = jax.jit(jax.vmap(_act_with_critic))
    fns["acting_with_critic"] = _blocking(act_critic_fn, loops)

    # (c) training, per algorithm, same rollout shape
    for name in algo_names:
        overrides = {"num_envs": num_envs, "num_steps": num_steps} if name != "grpo" else {}
        run = RunConfig(algo=ALGO_CONFIGS[name](**overrides), env=EnvConfig(id=env_id),
                        total_timesteps=num_envs * num_steps * num_updates)
        algo = algos.make_algorithm(run, (env, env_params, spec))
        hparams = lane_inputs(dataclasses.replace(run, num_seeds=lanes))[1]
        init = jax.jit(jax.vmap(partial(init_loop, algo)))
        train = jax.jit(jax.vmap(partial(run_updates, algo), in_axes=(0, None, None)))
        start_loop = init(keys, hparams)

        def _train(train=train, start_loop=start_loop, algo=algo):
            loop = train(start_loop, jnp.int32(0), jnp.int32(algo.num_updates))
            return float(loop.env_steps.sum())

        fns[name] = _train
        if data > 1 and name in algos.DATA_PARALLEL and num_envs % data == 0:
            fns[f"{name}_data{data}"] = data_parallel_fn(run, (env, env_params, spec), keys, data)

    rates = _interleaved_rates(fns, repeats)
    for name in ("random", "acting", "acting_unused", "acting_with_critic"):
        result[f"{name}_steps_per_s"] = rates.pop(name)
    for name, rate in rates.items():
        result[f"{name}_steps_per_s"] = rate
        result[f"{name}_over_random"] = rate / result["random_steps_per_s"]
        result[f"{name}_over_acting"] = rate / result["acting_steps_per_s"]
        result[f"{name}_over_acting_with_critic"] = rate / result["acting_with_critic_steps_per_s"]
        result[f"{name}_over_acting_unused"] = rate / result["acting_unused_steps_per_s"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[4, 1024])
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--env-steps", type=int, default=500_000,
                        help="env steps per lane per measurement (rounded to whole updates)")
    parser.add_argument("--lanes", type=int, default=1, help="vmapped agents (seeds)")
    parser.add_argument("--algos", nargs="+", default=["ppo"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=int, default=1,
                        help="also train one agent data parallel over this many devices (on a CPU "
                             "host: that many host devices, i.e. the cores, are exposed)")
    parser.add_argument("--out", default="experiments/results/bench_throughput.json")
    args = parser.parse_args()

    results = []
    for num_envs in args.num_envs:
        num_updates = max(1, args.env_steps // (num_envs * args.num_steps))
        res = bench_shape(args.env, num_envs, args.num_steps, num_updates, args.lanes, args.algos,
                          args.repeats, args.data)
        results.append(res)
        line = (f"{args.env} envs={num_envs} steps={args.num_steps} lanes={args.lanes}: "
                f"(a) random {res['random_steps_per_s']:,.0f}/s  (b) acting {res['acting_steps_per_s']:,.0f}/s"
                f"  (b0) acting, batch unused {res['acting_unused_steps_per_s']:,.0f}/s"
                f"  (b') acting+critic {res['acting_with_critic_steps_per_s']:,.0f}/s")
        trained = [k[:-len("_steps_per_s")] for k in res if k.endswith("_steps_per_s")
                   and k[:-len("_steps_per_s")] not in ("random", "acting", "acting_unused",
                                                          "acting_with_critic")]
        for name in trained:
            line += (f"\n  (c) {name} {res[f'{name}_steps_per_s']:,.0f}/s: c/a {res[f'{name}_over_random']:.3f}"
                     f"  c/b {res[f'{name}_over_acting']:.3f}  c/b0 {res[f'{name}_over_acting_unused']:.3f}"
                     f"  c/b' {res[f'{name}_over_acting_with_critic']:.3f}")
        print(line, flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": str(jax.devices()[0]), "jax": jax.__version__,
                               "results": results}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
