"""One agent on CartPole-v1: PPO, TRPO and GRPO env steps/s on the same batch, and where TRPO's and
GRPO's extra time goes, measured in one process (interleaved rounds, the fastest counts).

    python experiments/one_agent_algos.py --updates 32 --repeats 3

Variants, each one lane on one device through the runner's compiled chunk
(:class:`purejaxrl_opt.host.runner.Compiled`, the CLI's path), timed over ``--updates`` updates after
one warm-up update from a fresh init:

* ``ppo``: 4 envs x 128 steps, 4 epochs x 4 minibatches (PureJaxRL's CartPole config);
* ``trpo``: the same batch, TRPOConfig's defaults (10 CG iterations, up to 10 line-search candidates,
  the critic's own epochs); ``trpo_cg1`` 1 CG iteration, ``trpo_bt1`` one line-search candidate, so the
  differences price CG and the line search;
* ``grpo``: 1 group of 4 same-start episodes played to their end (at most 500 steps; the nearest to 4
  envs), 4 epochs x 4 minibatches; ``grpo_8x8`` the tuned 8 groups x 8. Its env steps are the real
  (unmasked) steps, so its rate depends on the episodes' lengths (early training: short ones);
  ``rollout_share`` is the share of an update spent in its group rollout (timed alone);
  ``grpo_check16`` the same as ``grpo`` with its update loop testing the budget once per 16 updates
  (``algo.check_every=16``, GPU's default; CPU's is 1): what the blocked loop costs where no test syncs.

Writes JSON (commit, command, load average before/after) to ``--out``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import provenance

import purejaxrl_opt.train  # noqa: F401  (the CLI's XLA flags, before JAX starts)

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("ppo", "trpo", "trpo_cg1", "trpo_bt1", "grpo", "grpo_check16", "grpo_8x8")


def run_for(variant: str, updates: int):
    from purejaxrl_opt.config.schema import algo_config, EnvConfig, RunConfig

    algo = variant.split("_")[0]
    extra = {"trpo_cg1": {"cg_iters": 1}, "trpo_bt1": {"max_backtracks": 1},
             "grpo": {"num_groups": 1, "group_size": 4}, "grpo_8x8": {"num_groups": 8, "group_size": 8},
             "grpo_check16": {"num_groups": 1, "group_size": 4, "check_every": 16}}.get(variant, {})
    if algo == "grpo":
        cfg = algo_config("grpo")(max_episode_steps=500, update_epochs=4, num_minibatches=4, **extra)
        per_update = 500 * cfg.num_groups * cfg.group_size  # the most; the budget never binds here
    else:
        cfg = algo_config(algo)(num_envs=4, num_steps=128, **extra)
        per_update = 4 * 128
    run = RunConfig(algo=cfg, env=EnvConfig(id="CartPole-v1"), seed=0, num_seeds=1,
                    total_timesteps=per_update * (updates + 2), eval_episodes=1)
    run.validate()
    return run


def prepare(variant: str, updates: int):
    import jax
    import jax.numpy as jnp

    from purejaxrl_opt.core import algos
    from purejaxrl_opt.host.runner import Compiled
    from purejaxrl_opt.host.sweep import lane_inputs

    run = run_for(variant, updates)
    algo = algos.make_algorithm(run)
    keys, hparams = lane_inputs(run)
    compiled = Compiled(algo, keys, hparams)
    start_loop = compiled.updates(compiled.init(keys, hparams), jnp.int32(0), jnp.int32(1))
    jax.block_until_ready(start_loop)

    def timed():
        loop = compiled.updates(start_loop, jnp.int32(1), jnp.int32(1 + updates))
        jax.block_until_ready(loop)
        return loop

    pieces = {"run": run, "compile_s": compiled.seconds, "timed": timed, "warm_steps": env_steps(start_loop)}
    if run.algo.name == "grpo":
        pieces["rollout"] = grpo_rollout_fn(algo, run, start_loop)
    return pieces


def grpo_rollout_fn(algo, run, loop):
    """One group rollout of the update (the policy at ``loop``), jitted alone: ``() -> batch``."""
    import jax

    from purejaxrl_opt.core.stages import rollout

    cfg = run.algo
    state = jax.tree_util.tree_map(lambda x: x[0], loop.algo_state)
    params = algo.policy_params(state)

    @jax.jit
    def one(key):
        return rollout.group_rollout_until_done(algo.env, algo.env_params, algo.spec, algo.dist,
                                                algo.policy.apply, params[0], params[1], key, cfg.num_groups,
                                                cfg.group_size, cfg.max_episode_steps, True)

    return lambda: jax.block_until_ready(one(jax.random.PRNGKey(1)))


def env_steps(loop) -> float:
    """The loop's env-step counter (uint32, summed over lanes exactly on the host)."""
    import numpy as np

    return float(np.asarray(loop.env_steps).astype(np.float64).sum())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--updates", type=int, default=32, help="a multiple of 16: grpo_check16 then computes no masked block")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "experiments/results/throughput_one_agent/algos.json"))
    args = parser.parse_args(argv)
    import jax

    load_before = provenance.load_average()
    prepared = {v: prepare(v, args.updates) for v in args.variants}
    rounds = {v: [] for v in args.variants}
    rollouts = {v: [] for v in args.variants if "rollout" in prepared[v]}
    counted = {}
    for _ in range(args.repeats):
        for v, p in prepared.items():
            before = time.perf_counter()
            loop = p["timed"]()
            rounds[v].append(time.perf_counter() - before)
            # the same updates every round (same start state and keys): the same env steps
            counted[v] = (env_steps(loop) - p["warm_steps"], int(jax.device_get(loop.update_idx).max()) - 1)
            if v in rollouts:
                before = time.perf_counter()
                p["rollout"]()
                rollouts[v].append(time.perf_counter() - before)
    results = {}
    for v, p in prepared.items():
        best = min(rounds[v])
        steps, updates = counted[v]
        r = results[v] = {"compile_s": round(p["compile_s"], 2), "seconds_best": round(best, 4),
                          "seconds_all": [round(x, 4) for x in rounds[v]], "updates": updates,
                          "env_steps": steps, "env_steps_per_s": round(steps / best, 1),
                          "ms_per_update": round(1e3 * best / max(updates, 1), 3)}
        if v in rollouts:
            r["rollout_ms"] = round(1e3 * min(rollouts[v]), 3)
            r["rollout_share"] = round(r["rollout_ms"] / r["ms_per_update"], 3)
    for v, r in results.items():
        if "ppo" in results:
            r["vs_ppo_env_steps_per_s"] = round(r["env_steps_per_s"] / results["ppo"]["env_steps_per_s"], 3)
        print(f"{v:9s} {r['env_steps_per_s']:>10,.0f} env steps/s  {r['ms_per_update']:8.2f} ms/update  "
              f"compile {r['compile_s']:.1f} s" + (f"  rollout {r['rollout_share']:.0%}" if "rollout_share" in r else ""))
    provenance.write_json(args.out, {"updates": args.updates, "repeats": args.repeats, "load_avg_before": load_before,
                                     "load_avg_after": provenance.load_average(), "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
