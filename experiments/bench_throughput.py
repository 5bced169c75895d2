"""Throughput benchmark: training vs. the env-stepping and acting limits, measured in one process.

For one env and batch shape it measures env steps/s of
  (a) raw env stepping with random actions (auto-reset, vmapped envs, jitted scan),
  (b) acting only: the rollout of training itself (actor forward + sampling + log-probs + env step +
      episode stats + the stored batch of transitions, all of which training uses),
  (c) full training with the given algorithm(s) (rollout + GAE + updates + metrics),
each timed over the same number of env steps after compiling, median of ``--repeats`` runs, and prints
and writes (JSON) the rates and the ratios c/a and c/b. Ratios are what to compare across machines.

    python experiments/bench_throughput.py --env CartPole-v1 --num-envs 4 1024 --algos ppo trpo
"""

from __future__ import annotations

import argparse
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
from purejaxrl_opt.runner import lane_hparams, lane_keys  # noqa: E402


def _time(fn, repeats: int) -> float:
    """Median wall seconds of ``fn()`` (which must block) over ``repeats`` calls, after one warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _batch_checksum(batch) -> jnp.ndarray:
    """A scalar that depends on every field of a rollout batch (keeps all of it in the program)."""
    return sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree_util.tree_leaves(batch))


def data_parallel_rate(run: RunConfig, env_tuple, keys, data: int, repeats: int) -> float:
    """Env steps/s of training one agent data parallel over ``data`` local devices (the runner's
    shard_map path: envs split over the devices, gradients pmean-ed every minibatch)."""
    from purejaxrl_opt import parallel
    from purejaxrl_opt.runner import Compiled

    algo = algos.make_algorithm(run, env_tuple)
    data_algo = algos.make_algorithm(run, env_tuple, axis_name=parallel.DATA)
    layout = parallel.make_layout(parallel.ParallelSettings(lanes="off", data=data), run, keys.shape[0],
                                  devices=jax.local_devices()[:data])
    hparams = lane_hparams(algo, keys.shape[0])
    compiled = Compiled(algo, keys, hparams, layout, data_algo)
    keys, hparams = compiled.place_inputs(keys, hparams)
    start_loop = compiled.init(keys, hparams)
    measured = {}

    def _train():
        loop = compiled.updates(start_loop, jnp.int32(0), jnp.int32(algo.num_updates))
        measured["n"] = float(jax.device_get(loop.env_steps).sum())

    seconds = _time(_train, repeats)
    return measured["n"] / seconds


def bench_shape(env_id: str, num_envs: int, num_steps: int, num_updates: int, lanes: int,
                algo_names: list[str], repeats: int, data: int = 1) -> dict:
    env, env_params, spec = envs.make(env_id)
    steps = lanes * num_envs * num_steps * num_updates
    keys = lane_keys(0, lanes)
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
    result["random_steps_per_s"] = steps / _time(lambda: random_fn(keys).block_until_ready(), repeats)

    # (b) acting only: the training rollout without any learning
    run = RunConfig(algo=ALGO_CONFIGS["ppo"](num_envs=num_envs, num_steps=num_steps),
                    env=EnvConfig(id=env_id), total_timesteps=num_envs * num_steps * num_updates)
    ppo = algos.make_algorithm(run, (env, env_params, spec))
    hparams = lane_hparams(ppo, lanes)
    loops = jax.jit(jax.vmap(partial(init_loop, ppo)))(keys, hparams)

    def _act(loop):
        state = loop.algo_state

        def _body(carry, key):
            carry, batch, stats = rollout.collect(env, env_params, spec, ppo.dist, ppo.actor_fn,
                                                  state.params["actor"], state.obs_norm, carry, key,
                                                  num_steps)
            # use every field of the batch, as training does: otherwise XLA drops the log-probs
            # and the stored transitions, and this would time less than the rollout of training
            return carry, stats.return_sum + _batch_checksum(batch)

        _, sums = jax.lax.scan(_body, state.env, jax.random.split(state.key, num_updates))
        return sums.sum()

    act_fn = jax.jit(jax.vmap(_act))
    result["acting_steps_per_s"] = steps / _time(lambda: act_fn(loops).block_until_ready(), repeats)

    # (b') acting as most JAX PPO code does it: actor *and* critic forward every env step. Not what
    # our rollout does (values are computed once per batch afterwards); reported only so that our
    # ratios can be compared with figures quoted against that baseline.
    def _act_with_critic(loop):
        state = loop.algo_state
        critic = Critic(spec, run.network)

        def _actor_and_critic(params, obs):
            return {**ppo.actor_fn(params["actor"], obs),
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
    result["acting_with_critic_steps_per_s"] = steps / _time(
        lambda: act_critic_fn(loops).block_until_ready(), repeats)

    # (c) training, per algorithm, same rollout shape
    for name in algo_names:
        overrides = {"num_envs": num_envs, "num_steps": num_steps} if name != "grpo" else {}
        run = RunConfig(algo=ALGO_CONFIGS[name](**overrides), env=EnvConfig(id=env_id),
                        total_timesteps=num_envs * num_steps * num_updates)
        algo = algos.make_algorithm(run, (env, env_params, spec))
        hparams = lane_hparams(algo, lanes)
        init = jax.jit(jax.vmap(partial(init_loop, algo)))
        train = jax.jit(jax.vmap(partial(run_updates, algo), in_axes=(0, None, None)))
        start_loop = init(keys, hparams)
        measured_steps = {}

        def _train():
            loop = train(start_loop, jnp.int32(0), jnp.int32(algo.num_updates))
            measured_steps["n"] = float(loop.env_steps.sum())

        seconds = _time(_train, repeats)
        rate = measured_steps["n"] / seconds
        result[f"{name}_steps_per_s"] = rate
        result[f"{name}_over_random"] = rate / result["random_steps_per_s"]
        result[f"{name}_over_acting"] = rate / result["acting_steps_per_s"]
        result[f"{name}_over_acting_with_critic"] = rate / result["acting_with_critic_steps_per_s"]
        if data > 1 and name in algos.DATA_PARALLEL and num_envs % data == 0:
            rate = data_parallel_rate(run, (env, env_params, spec), keys, data, repeats)
            result[f"{name}_data{data}_steps_per_s"] = rate
            result[f"{name}_data{data}_over_acting"] = rate / result["acting_steps_per_s"]
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
                f"random {res['random_steps_per_s']:,.0f}/s  acting {res['acting_steps_per_s']:,.0f}/s"
                f"  acting+critic {res['acting_with_critic_steps_per_s']:,.0f}/s")
        for name in args.algos:
            line += (f"  {name} {res[f'{name}_steps_per_s']:,.0f}/s (c/a {res[f'{name}_over_random']:.3f},"
                     f" c/b {res[f'{name}_over_acting']:.3f},"
                     f" c/b' {res[f'{name}_over_acting_with_critic']:.3f})")
            if f"{name}_data{args.data}_steps_per_s" in res:
                line += (f"  {name} data={args.data} {res[f'{name}_data{args.data}_steps_per_s']:,.0f}/s"
                         f" (c/b {res[f'{name}_data{args.data}_over_acting']:.3f})")
        print(line, flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": str(jax.devices()[0]), "jax": jax.__version__,
                               "results": results}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
