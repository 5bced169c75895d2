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

Like the CLI, it exposes one host device per core on a CPU-only host (xla_flags.py). (c) trains all
lanes on one device; ``<algo>_devices`` trains them in the CLI's default layout
(``parallel.lanes=auto``: equal lane blocks side by side on the devices), reported against (c).
With ``--cli``, PPO through ``runner.execute`` is compared with the same layout's bare function.

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
from purejaxrl_opt.host.xla_flags import set_default_xla_flags  # noqa: E402  (before JAX starts)

set_default_xla_flags()  # the CLI's flags: opt level 1, one host device per core

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from purejaxrl_opt.core import algos
from purejaxrl_opt import envs
from purejaxrl_opt.core.stages import rollout  # noqa: E402
from purejaxrl_opt.core.algos.base import init_loop, run_updates  # noqa: E402
from purejaxrl_opt.config.schema import algo_config, EnvConfig, RunConfig  # noqa: E402
from purejaxrl_opt.core.models.networks import Critic  # noqa: E402
from purejaxrl_opt.host.sweep import lane_inputs, lane_keys  # noqa: E402


class SelfTimed:
    """A measurement that reports its own rate (``fn() -> env steps/s``) and needs no warm-up: the
    CLI run, which compiles and times itself as a user's run does."""

    def __init__(self, fn):
        self.fn = fn


def _interleaved_rates(fns: dict, repeats: int) -> dict:
    """Env steps/s of each blocking ``fn() -> env steps`` in ``fns``: one warm-up each, then
    ``repeats`` rounds that time every fn once (a, b, c, a, b, c, ...), median per fn. Interleaving
    makes slow spells of a shared machine hit every measurement alike, so the ratios hold.
    A :class:`SelfTimed` entry is run once per round, unwarmed, and its own rate is taken."""
    for fn in fns.values():
        if not isinstance(fn, SelfTimed):
            fn()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            if isinstance(fn, SelfTimed):
                samples[name].append(fn.fn())
                continue
            start = time.perf_counter()
            steps = fn()
            samples[name].append(steps / (time.perf_counter() - start))
    return {name: statistics.median(rates) for name, rates in samples.items()}


def _batch_checksum(batch) -> jnp.ndarray:
    """A scalar that depends on every field of a rollout batch (keeps all of it in the program)."""
    return sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree_util.tree_leaves(batch))


def _sharded_train(run: RunConfig, env_tuple, keys, layout, data_algo=None):
    """The runner's compiled functions for ``layout`` (shard_map over its mesh), initialised; returns
    (a blocking callable that trains every update and returns the env steps it ran, compile seconds)."""
    from purejaxrl_opt.host.runner import Compiled

    algo = algos.make_algorithm(run, env_tuple)
    hparams = lane_inputs(dataclasses.replace(run, num_seeds=keys.shape[0]))[1]
    compiled = Compiled(algo, keys, hparams, layout, data_algo)
    keys, hparams = compiled.place_inputs(keys, hparams)
    start_loop = compiled.init(keys, hparams)

    def _train():
        loop = compiled.updates(start_loop, jnp.int32(0), jnp.int32(algo.num_updates))
        return float(jax.device_get(loop.env_steps).sum())

    return _train, compiled.seconds


def data_parallel_fn(run: RunConfig, env_tuple, keys, data: int):
    """A blocking callable that trains one agent data parallel over ``data`` local devices (the
    runner's shard_map path: envs split over the devices, gradients pmean-ed every minibatch) and
    returns the env steps it ran; and its compile seconds."""
    from purejaxrl_opt.host import parallel

    layout = parallel.make_layout(parallel.ParallelConfig(lanes="off", data=data), run, keys.shape[0],
                                  devices=jax.local_devices()[:data])
    data_algo = algos.make_algorithm(run, env_tuple, axis_name=parallel.DATA)
    return _sharded_train(run, env_tuple, keys, layout, data_algo)


def lanes_fn(run: RunConfig, env_tuple, keys):
    """A blocking callable that trains the lanes as the CLI lays them out (``parallel.lanes=auto``:
    equal lane blocks over the local devices, one per core on a CPU host), or None when that layout
    is one device. Returns (callable, compile seconds, lane blocks)."""
    from purejaxrl_opt.host import parallel

    layout = parallel.make_layout(parallel.ParallelConfig(), run, keys.shape[0])
    if not layout.active:
        return None, 0.0, 1
    return (*_sharded_train(run, env_tuple, keys, layout), layout.lane_rows)


def bench_shape(env_id: str, num_envs: int, num_steps: int, num_updates: int, lanes: int,
                algo_names: list[str], repeats: int, data: int = 1, cli: bool = False) -> dict:
    env, env_params, spec = envs.make(env_id)
    steps = lanes * num_envs * num_steps * num_updates
    keys = lane_keys(range(lanes))
    result = {"env": env_id, "num_envs": num_envs, "num_steps": num_steps, "num_updates": num_updates,
              "lanes": lanes, "env_steps_per_measure": steps}

    # (a) random actions
    def _random(key):
        carry = rollout.reset_carry(env, env_params, key, num_envs)
        sample = jax.vmap(env.action_space(env_params).sample)

        def _body(carry, step_key):
            env_state, obs = carry
            action_key, env_key = jax.random.split(step_key)
            action = sample(jax.random.split(action_key, num_envs))
            obs, env_state, reward, *_ = envs.step_batch(env, env_params, jax.random.split(env_key, num_envs),
                                                         env_state, action)
            return (env_state, obs), reward.sum()

        _, rewards = jax.lax.scan(_body, (carry.env_state, carry.obs),
                                  jax.random.split(key, num_steps * num_updates))
        return rewards.sum()

    random_fn = jax.jit(jax.vmap(_random))
    def _blocking(fn, *args):
        return lambda: (jax.block_until_ready(fn(*args)), steps)[1]

    fns = {"random": _blocking(random_fn, keys)}

    # (b) acting only: the training rollout without any learning
    run = RunConfig(algo=algo_config("ppo")(num_envs=num_envs, num_steps=num_steps),
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

        def _actor(p):  # the actor's distribution parameters, without the value carried along as "_"
            return {k: v for k, v in p.items() if k != "_"}

        class _Dist:  # samples from the actor's output, ignores the value
            def sample(self, key, p):
                return ppo.dist.sample(key, _actor(p))

            def draw(self, key, p):  # the rollout draws the actions' noise before its loop
                return ppo.dist.draw(key, _actor(p))

            def sample_from(self, noise, p):
                return ppo.dist.sample_from(noise, _actor(p))

            def postprocess(self, action):
                return ppo.dist.postprocess(action)

            def log_prob(self, p, a):
                return ppo.dist.log_prob(_actor(p), a) + 0 * p["_"]

        def _body(carry, key):
            carry, batch, stats = rollout.collect(env, env_params, spec, _Dist(), _actor_and_critic,
                                                  state.params, state.obs_norm, carry, key, num_steps)
            # the log-probs carry 0 * value: using them keeps the critic's forward in the program
            return carry, stats.return_sum + _batch_checksum(batch)

        _, sums = jax.lax.scan(_body, state.env, jax.random.split(state.key, num_updates))
        return sums.sum()

    act_critic_fn = jax.jit(jax.vmap(_act_with_critic))
    fns["acting_with_critic"] = _blocking(act_critic_fn, loops)

    # (c) training, per algorithm, same rollout shape (GRPO: its own groups x episodes)
    trained = []
    for name in algo_names:
        if name == "grpo":
            # the same number of parallel envs, as groups of (up to) 8 episodes from one start
            group_size = min(8, num_envs)
            overrides = {"num_groups": max(1, num_envs // group_size), "group_size": group_size}
        else:
            overrides = {"num_envs": num_envs, "num_steps": num_steps}
        cfg = algo_config(name)(**overrides)
        total = num_envs * num_steps * num_updates
        run = RunConfig(algo=cfg, env=EnvConfig(id=env_id), total_timesteps=total)
        algo = algos.make_algorithm(run, (env, env_params, spec))
        hparams = lane_inputs(dataclasses.replace(run, num_seeds=lanes))[1]
        start = time.perf_counter()
        init = jax.jit(jax.vmap(partial(init_loop, algo))).lower(keys, hparams).compile()
        start_loop = init(keys, hparams)
        train = jax.jit(jax.vmap(partial(run_updates, algo), in_axes=(0, None, None))).lower(
            start_loop, jnp.int32(0), jnp.int32(1)).compile()
        result[f"{name}_compile_s"] = time.perf_counter() - start
        if name == "ppo":
            params = jax.tree_util.tree_map(lambda x: x[0], start_loop.algo_state.params)
            result[f"{name}_update_gflop"] = _ppo_update_gflop(run, params)

        def _train(train=train, start_loop=start_loop, algo=algo):
            loop = train(start_loop, jnp.int32(0), jnp.int32(algo.num_updates))
            return float(loop.env_steps.sum())

        fns[name] = _train
        trained.append(name)
        sharded, seconds, blocks = lanes_fn(dataclasses.replace(run, num_seeds=lanes),
                                            (env, env_params, spec), keys)
        if sharded is not None:  # the CLI's default layout: lane blocks side by side on the devices
            fns[f"{name}_devices"] = sharded
            trained.append(f"{name}_devices")
            result[f"{name}_devices_compile_s"] = seconds
            result[f"{name}_devices_lane_blocks"] = blocks
        if data > 1 and name in algos.DATA_PARALLEL and num_envs % data == 0:
            fns[f"{name}_data{data}"], result[f"{name}_data{data}_compile_s"] = data_parallel_fn(
                run, (env, env_params, spec), keys, data)
            trained.append(f"{name}_data{data}")

    if cli:
        # what a user of the CLI gets: runner.execute as train.py calls it (progress chunks, the
        # console logger's per-chunk host reads, the final checkpoint, evaluation, artifacts), its
        # own env_steps_per_second (compile excluded, init and the first cold execution included),
        # in the same rounds as the bare jitted function above: same lanes, seeds and num_updates
        fns["ppo_cli"] = SelfTimed(partial(_cli_rate, env_id, num_envs, num_steps, num_updates, lanes))
    rates = _interleaved_rates(fns, repeats)
    if cli:
        result["ppo_cli_steps_per_s"] = rates.pop("ppo_cli")
        # the CLI runs the default layout: compare it with the same program, bare
        result["ppo_cli_over_bare"] = result["ppo_cli_steps_per_s"] / rates.get("ppo_devices", rates["ppo"])
    for name in ("random", "acting", "acting_unused", "acting_with_critic"):
        result[f"{name}_steps_per_s"] = rates.pop(name)
    result["trained"] = trained
    for name, rate in rates.items():
        result[f"{name}_steps_per_s"] = rate
        result[f"{name}_over_random"] = rate / result["random_steps_per_s"]
        result[f"{name}_over_acting"] = rate / result["acting_steps_per_s"]
        result[f"{name}_over_acting_with_critic"] = rate / result["acting_with_critic_steps_per_s"]
        result[f"{name}_over_acting_unused"] = rate / result["acting_unused_steps_per_s"]
        base = name.removesuffix("_devices")
        if name != base:
            result[f"{name}_over_one_device"] = rate / rates[base]
        if f"{name}_update_gflop" in result:
            # lane-updates per second x FLOPs per lane-update
            result[f"{name}_gflop_per_s"] = result[f"{name}_update_gflop"] * rate / (num_envs * num_steps)
    return result


def _cli_rate(env_id: str, num_envs: int, num_steps: int, num_updates: int, lanes: int) -> float:
    """One run through ``runner.execute`` with the CLI's defaults (console progress lines, 10 chunks,
    final checkpoint); its own ``env_steps_per_second``."""
    import tempfile

    from purejaxrl_opt.host import loggers, runner
    from purejaxrl_opt.formats.checkpoint import CheckpointConfig

    run = RunConfig(algo=algo_config("ppo")(num_envs=num_envs, num_steps=num_steps),
                    env=EnvConfig(id=env_id), num_seeds=lanes,
                    total_timesteps=num_envs * num_steps * num_updates)
    run.validate()
    with tempfile.TemporaryDirectory() as out:
        sinks = loggers.make_loggers({"kind": "console"}, "lines")
        result = runner.execute(run, out, sinks, num_chunks=10, checkpoints=CheckpointConfig())
    return result.summary["env_steps_per_second"]


def _ppo_update_gflop(run: RunConfig, params: dict) -> float:
    """Multiply-add FLOPs of one PPO update of one lane, counted from the dense kernels (XLA's cost
    analysis counts a loop body once, so it cannot count a scan's work): the rollout's actor forward
    per env step, the critic's forward on the batch and the final observations, and
    ``update_epochs`` passes of forward + backward (3x forward) over actor and critic. MLP torsos
    only; NaN otherwise."""
    def dense_flops(tree) -> float:
        kernels = [x for x in jax.tree_util.tree_leaves(tree) if x.ndim == 2]
        if any(x.ndim > 2 for x in jax.tree_util.tree_leaves(tree)):
            return float("nan")
        return 2.0 * sum(x.size for x in kernels)

    actor, critic = dense_flops(params["actor"]), dense_flops(params["critic"])
    samples = run.algo.num_envs * run.algo.num_steps
    flops = samples * (actor + 2 * critic + run.algo.update_epochs * 3 * (actor + critic))
    return flops / 1e9


def parse_shapes(shapes: list[str]) -> list[tuple[int, int]]:
    """``["4x1", "4x8", "1024x1"]`` -> ``[(num_envs, lanes), ...]``."""
    parsed = []
    for shape in shapes:
        envs_str, _, lanes_str = shape.partition("x")
        if not (envs_str.isdigit() and lanes_str.isdigit()):
            raise SystemExit(f"--shapes: {shape!r} is not ENVSxLANES (e.g. 4x8)")
        parsed.append((int(envs_str), int(lanes_str)))
    return parsed


def matmul_flops_per_s(size: int = 1024, repeats: int = 5) -> float:
    """FLOP/s of a plain ``[size, size] @ [size, size]`` float32 matmul: the machine's ceiling for the
    dense work an update does."""
    a = jax.random.normal(jax.random.PRNGKey(0), (size, size), jnp.float32)
    matmul = jax.jit(lambda x: x @ x)
    jax.block_until_ready(matmul(a))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(matmul(a))
        times.append(time.perf_counter() - start)
    return 2 * size**3 / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--shapes", nargs="+", default=["4x1", "4x8", "4x32", "1024x1"],
                        help="ENVSxLANES: num_envs per agent x vmapped agents (seeds), one "
                             "measurement each (default: the lanes axis 1/8/32 agents of 4 envs, and "
                             "one agent of 1024 envs)")
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--env-steps", type=int, default=500_000,
                        help="env steps per lane per measurement (rounded to whole updates)")
    parser.add_argument("--algos", nargs="+", default=["ppo", "trpo"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=int, default=1,
                        help="also train one agent data parallel over this many devices (on a CPU "
                             "host: that many host devices, i.e. the cores, are exposed)")
    parser.add_argument("--cli", action="store_true",
                        help="also run PPO through the CLI's runner (chunks, console progress, "
                             "evaluation, artifacts) and report its env steps/s against the bare "
                             "jitted training function")
    parser.add_argument("--out", default="experiments/results/bench_throughput.json")
    args = parser.parse_args()
    if args.cli and not jax.config.jax_compilation_cache_dir:
        # every CLI run compiles its own functions, as a user's run does; a process-local cache
        # makes the repeats cache hits (compile time is not part of env_steps_per_second)
        import tempfile

        jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="bench_xla_cache_"))

    import provenance  # experiments/provenance.py: the commit, the command, the load average

    load_before = provenance.load_average()
    results = []
    for num_envs, lanes in parse_shapes(args.shapes):
        num_updates = max(1, args.env_steps // (num_envs * args.num_steps))
        res = bench_shape(args.env, num_envs, args.num_steps, num_updates, lanes, args.algos,
                          args.repeats, args.data, args.cli and "ppo" in args.algos)
        results.append(res)
        print(format_result(args.env, res), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {**provenance.stamp(), "machine": provenance.machine(), "load_avg_before": load_before,
               "load_avg_after": provenance.load_average(),
               "device": str(jax.devices()[0]), "device_kind": jax.devices()[0].device_kind,
               "jax": jax.__version__, "matmul_flops_per_s": matmul_flops_per_s(),
               "results": results}
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"plain 1024^3 float32 matmul: {payload['matmul_flops_per_s'] / 1e9:,.1f} GFLOP/s")
    print(f"wrote {out}")


def format_result(env_id: str, res: dict) -> str:
    line = (f"{env_id} envs={res['num_envs']} steps={res['num_steps']} lanes={res['lanes']}: "
            f"(a) random {res['random_steps_per_s']:,.0f}/s  (b) acting {res['acting_steps_per_s']:,.0f}/s"
            f"  (b0) acting, batch unused {res['acting_unused_steps_per_s']:,.0f}/s"
            f"  (b') acting+critic {res['acting_with_critic_steps_per_s']:,.0f}/s")
    for name in res["trained"]:
        if name.endswith("_devices"):
            line += (f"\n  (c) {name}: lanes in {res[f'{name}_lane_blocks']} blocks over the devices (the CLI's "
                     f"parallel.lanes=auto) {res[f'{name}_steps_per_s']:,.0f}/s = "
                     f"{res[f'{name}_over_one_device']:.2f} x one device; c/b {res[f'{name}_over_acting']:.3f}")
            continue
        line += (f"\n  (c) {name} {res[f'{name}_steps_per_s']:,.0f}/s (compile {res[f'{name}_compile_s']:.1f} s,"
                 f" {res.get(f'{name}_gflop_per_s', float('nan')):.3g} GFLOP/s in dense layers):"
                 f" c/a {res[f'{name}_over_random']:.3f}  c/b {res[f'{name}_over_acting']:.3f}"
                 f"  c/b0 {res[f'{name}_over_acting_unused']:.3f}"
                 f"  c/b' {res[f'{name}_over_acting_with_critic']:.3f}")
    if "ppo_cli_steps_per_s" in res:
        line += (f"\n  ppo through the CLI runner {res['ppo_cli_steps_per_s']:,.0f}/s = "
                 f"{res['ppo_cli_over_bare']:.3f} x the bare jitted function")
    return line


if __name__ == "__main__":
    main()
