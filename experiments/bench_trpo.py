"""TRPO benchmark: training throughput against PPO at the same rollout shape, and where TRPO's update
time goes.

1. Throughput: full training (rollout + GAE + update + metrics, jitted and lane-vmapped
   ``run_updates``, as the runner does) of TRPO and PPO with the same ``num_envs x num_steps`` and
   otherwise default configs (``--set key=value`` changes TRPO's), env steps/s (median of
   ``--repeats``, the two timed in alternation, compile excluded) and the ratio ``trpo / ppo``.
   For the random-action and acting-only limits see bench_throughput.py (``--algos ppo trpo``).
2. Breakdown: on a realistic batch (collected by the rollout of training, GAE, normalised
   advantages) the pieces of one TRPO update are jitted separately and timed:
     * ``cg_fvp``      — surrogate gradient, network linearisation, ``cg_iters`` CG iterations of
                         Fisher-vector products and the ``x^T F x`` product (the natural-gradient
                         direction);
     * ``line_search`` — the backtracking line search from that direction;
     * ``critic``      — ``critic_epochs x critic_minibatches`` Adam steps;
     * ``update``      — one whole ``update`` (rollout + GAE + all of the above);
   ``rollout_and_rest = update - (cg_fvp + line_search + critic)`` (clamped at 0: pieces jitted
   apart carry their own overheads, so with large batches they can add up to a little over the
   fused update). Shares are of ``update``.

    python experiments/bench_trpo.py --env CartPole-v1 --num-envs 4 64 --num-steps 128

Prints a line per shape and writes JSON to ``experiments/results/bench_trpo.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp

from purejaxrl_opt.core import algos
from purejaxrl_opt import envs
from purejaxrl_opt.core.stages import losses, natural_gradient, rollout
from purejaxrl_opt.core.algos import trpo
from purejaxrl_opt.core.algos.base import init_loop, run_updates
from purejaxrl_opt.config.schema import EnvConfig, RunConfig
from purejaxrl_opt.core.algos.ppo import PPOConfig
from purejaxrl_opt.core.algos.trpo import TRPOConfig
from purejaxrl_opt.host.sweep import lane_inputs


def _time(fn, repeats: int) -> float:
    """Median seconds of ``fn()`` (blocking) over ``repeats`` calls after a compile/warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _env_config(env_id: str) -> EnvConfig:
    return EnvConfig(id=env_id, normalize_obs=env_id == "Pendulum-v1")


def make_training(run: RunConfig, lanes: int):
    """A blocking ``() -> None`` running all of ``run``'s updates for ``lanes`` vmapped seeds (compiled)."""
    algo = algos.make_algorithm(run)
    keys, hparams = lane_inputs(dataclasses.replace(run, num_seeds=lanes))
    start_loop = jax.jit(jax.vmap(partial(init_loop, algo)))(keys, hparams)
    train = jax.jit(jax.vmap(partial(run_updates, algo), in_axes=(0, None, None)))

    def _train():
        jax.block_until_ready(train(start_loop, jnp.int32(0), jnp.int32(algo.num_updates)))

    _train()  # compile + warm-up
    return _train


def training_rates(runs: dict[str, RunConfig], lanes: int, repeats: int) -> dict[str, float]:
    """Env steps/s of each run (compile excluded), timed in alternation so that load drift on a shared
    machine hits every algorithm alike; median over ``repeats``."""
    trains = {name: make_training(run, lanes) for name, run in runs.items()}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, train in trains.items():
            start = time.perf_counter()
            train()
            times[name].append(time.perf_counter() - start)
    return {name: lanes * run.algo.num_updates(run.total_timesteps) * run.algo.batch_env_steps() / statistics.median(times[name])
            for name, run in runs.items()}


def breakdown(env_id: str, num_envs: int, num_steps: int, repeats: int, **algo_overrides) -> dict:
    """Seconds per call of each jitted piece of one TRPO update on a realistic batch."""
    run = RunConfig(algo=TRPOConfig(num_envs=num_envs, num_steps=num_steps, **algo_overrides),
                    env=_env_config(env_id), total_timesteps=num_envs * num_steps)
    run.validate()
    env, env_params, spec = envs.make(env_id)
    algo = algos.make_algorithm(run, (env, env_params, spec))
    parts = trpo.make_parts(run, spec)
    cfg = run.algo
    hparams = algo.default_hparams()
    state = jax.jit(algo.init)(jax.random.PRNGKey(0), hparams)

    @jax.jit
    def make_batch(state):
        _, batch, _ = rollout.collect(env, env_params, spec, parts.dist, parts.networks.policy.apply,
                                      state.actor_params, state.obs_norm, state.env,
                                      jax.random.PRNGKey(1), num_steps, run.env.clip_actions)
        obs = envs.obs_norm_apply(state.obs_norm, batch.obs)
        values = parts.networks.value.apply(state.critic_params, obs)
        next_values = parts.networks.value.apply(state.critic_params,
                                         envs.obs_norm_apply(state.obs_norm, batch.final_obs))
        advantages, returns = rollout.gae(batch.reward, values, next_values, batch.terminated,
                                          batch.done, hparams["gamma"], hparams["gae_lambda"])
        flat = jax.tree_util.tree_map(lambda x: x.reshape((num_envs * num_steps,) + x.shape[2:]),
                                      (obs, batch.action, advantages, returns))
        return flat[0], flat[1], losses.normalize(flat[2]), flat[3]

    obs, action, advantages, returns = make_batch(state)
    key = jax.random.PRNGKey(2)

    @jax.jit
    def cg_fvp(actor_params):
        problem = parts.policy_problem(actor_params, obs, action, advantages, key)
        grad = jax.grad(lambda theta: problem.objective_fn(theta)[0])(problem.theta_old)
        direction, residual = natural_gradient.conjugate_gradient(problem.fvp, grad, cfg.cg_iters,
                                                                  hparams["cg_damping"])
        curvature = jnp.vdot(direction, problem.fvp(direction))
        return jnp.sqrt(2 * hparams["max_kl"] / curvature) * direction, residual

    full_step, _ = cg_fvp(state.actor_params)

    @jax.jit
    def line_search(actor_params, full_step):
        problem = parts.policy_problem(actor_params, obs, action, advantages, key)
        surrogate_old = problem.objective_fn(problem.theta_old)[0]
        return natural_gradient.backtracking_line_search(
            problem.theta_old, full_step, problem.objective_fn, surrogate_old, hparams["max_kl"],
            hparams["backtrack_coeff"], cfg.max_backtracks)

    critic = jax.jit(lambda params, opt_state: parts.critic_step(params, opt_state, obs, returns, key,
                                                                 hparams))
    update = jax.jit(algo.update)
    seconds = {
        "cg_fvp": _time(lambda: cg_fvp(state.actor_params), repeats),
        "line_search": _time(lambda: line_search(state.actor_params, full_step), repeats),
        "critic": _time(lambda: critic(state.critic_params, state.critic_opt_state), repeats),
        "update": _time(lambda: update(state, hparams, jnp.int32(0)), repeats),
    }
    accepted_index = int(line_search(state.actor_params, full_step).index)
    seconds["rollout_and_rest"] = max(
        seconds["update"] - seconds["cg_fvp"] - seconds["line_search"] - seconds["critic"], 0.0)
    shares = {f"share_{k}": v / seconds["update"] for k, v in seconds.items() if k != "update"}
    return {"env": env_id, "num_envs": num_envs, "num_steps": num_steps,
            "config": {k: getattr(cfg, k) for k in ("cg_iters", "fvp", "fvp_subsample",
                                                     "max_backtracks", "critic_epochs",
                                                     "critic_minibatches")},
            "line_search_index_on_this_batch": accepted_index,
            "seconds": seconds, **shares}


def _parse_overrides(pairs: list[str]) -> dict:
    overrides = {}
    for pair in pairs:
        key, value = pair.split("=", 1)
        overrides[key] = json.loads(value) if value[:1].isdigit() or value[:1] in "-." else value
    return overrides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[4, 64])
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--env-steps", type=int, default=200_000,
                        help="env steps per lane per throughput measurement")
    parser.add_argument("--lanes", type=int, default=1, help="vmapped agents (seeds) for throughput")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="TRPO config overrides, e.g. fvp_subsample=1.0 critic_epochs=5")
    parser.add_argument("--out", default="experiments/results/bench_trpo.json")
    args = parser.parse_args()
    overrides = _parse_overrides(args.set)

    results = []
    for num_envs in args.num_envs:
        shape = {"num_envs": num_envs, "num_steps": args.num_steps}
        num_updates = max(1, args.env_steps // (num_envs * args.num_steps))
        total = num_updates * num_envs * args.num_steps
        runs = {name: RunConfig(algo=cfg, env=_env_config(args.env), total_timesteps=total)
                for name, cfg in (("ppo", PPOConfig(**shape)),
                                  ("trpo", TRPOConfig(**shape, **overrides)))}
        for run in runs.values():
            run.validate()
        rates = {"lanes": args.lanes, "env_steps_per_lane": total}
        for name, rate in training_rates(runs, args.lanes, args.repeats).items():
            rates[f"{name}_steps_per_s"] = rate
        rates["trpo_over_ppo"] = rates["trpo_steps_per_s"] / rates["ppo_steps_per_s"]
        parts = breakdown(args.env, num_envs, args.num_steps, args.repeats * 3, **overrides)
        results.append({"throughput": rates, "breakdown": parts})
        s = parts["seconds"]
        print(f"{args.env} envs={num_envs} steps={args.num_steps} lanes={args.lanes}: "
              f"ppo {rates['ppo_steps_per_s']:,.0f}/s  trpo {rates['trpo_steps_per_s']:,.0f}/s  "
              f"trpo/ppo {rates['trpo_over_ppo']:.2f}  | one TRPO update {1e3 * s['update']:.2f} ms: "
              f"CG+FVP {100 * parts['share_cg_fvp']:.0f}%  line search "
              f"{100 * parts['share_line_search']:.0f}%  critic {100 * parts['share_critic']:.0f}%  "
              f"rollout+rest {100 * parts['share_rollout_and_rest']:.0f}%", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": str(jax.devices()[0]), "jax": jax.__version__,
                               "trpo_overrides": overrides, "results": results}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
