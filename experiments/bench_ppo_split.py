"""Where one PPO update's time goes, on any env and config: the env's stepping, acting, the critic's
values and GAE, and the epochs of minibatch gradient steps, measured piecewise in one process.

For one agent (one lane on the first device: the CLI's flags give XLA:CPU one host device per core, and
one device's large ops still use every core through XLA's intra-op threads) on the composed config
(``--set`` takes the CLI's overrides, e.g. a tuned file), each piece is its own jitted function of the
same state (the state after one warm-up update of training), timed ``--repeats`` times in interleaved
rounds (the fastest round counts: a shared machine's slow spells hit every piece alike):

  env_step    ``num_steps`` batched env steps with uniformly random actions (``envs.step_batch``, the
              rollout's own auto-resetting step; continuous actions: uniform in the action box)
  rollout     the training rollout (``rollout.collect``): the policy acting and sampling, then the same
              env steps
  experience  the rollout, then the critic's values (recurrent: the critic replayed over the rollout),
              bootstrap values, GAE (``ActorCriticStage.experience``)
  update      one whole PPO update as training runs it: experience, then ``update_epochs`` x
              ``num_minibatches`` gradient steps, metrics and observation statistics

Shares of ``update``: ``env_step``; acting = ``rollout - env_step``; values and GAE = ``experience -
rollout``; epochs = ``update - experience`` (pieces jitted apart carry their own small overheads, so
differences are clamped at 0).

    python experiments/bench_ppo_split.py --set env=craftax/Craftax-Symbolic-v1 tuned=ppo_craftax/Craftax-Symbolic-v1-rnn

Prints one line per piece and writes JSON (commit, command, load average) to ``--out`` (default
``experiments/results/bench_ppo_split/<label>.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


import purejaxrl_opt.train  # noqa: F401 - the CLI's XLA flags, set before JAX starts

ROOT = Path(__file__).resolve().parents[1]


def _random_actions(spec, key, num_envs: int):
    import jax
    import jax.numpy as jnp

    if spec.discrete:
        return jax.random.randint(key, (num_envs,), 0, spec.num_actions)
    low = jnp.asarray(spec.action_low if spec.action_low is not None else (-1.0,) * spec.num_actions)
    high = jnp.asarray(spec.action_high if spec.action_high is not None else (1.0,) * spec.num_actions)
    return jax.random.uniform(key, (num_envs, spec.num_actions), minval=low, maxval=high)


def pieces(algo, stage, state, hparams):
    """name -> a jitted zero-argument function of the fixed ``state`` (returns something to block on)."""
    import jax
    import jax.numpy as jnp

    from purejaxrl_opt import envs
    from purejaxrl_opt.core.stages import rollout

    run, cfg = algo.run, algo.run.algo
    env, env_params, spec = algo.env, algo.env_params, algo.spec
    num_envs = cfg.num_envs
    key = jax.random.PRNGKey(1)

    @jax.jit
    def env_step(env_state, key):
        def body(env_state, step_key):
            action_key, env_key = jax.random.split(step_key)
            action = _random_actions(spec, action_key, num_envs)
            obs, env_state, reward, *_ = envs.step_batch(env, env_params, rollout.env_keys(env_key, num_envs),
                                                         env_state, action)
            return env_state, jnp.sum(obs.astype(jnp.float32)) + jnp.sum(reward)

        return jax.lax.scan(body, env_state, jax.random.split(key, cfg.num_steps))

    @jax.jit
    def collect(state, key):
        actor = stage.policy if stage.recurrent else stage.policy.apply
        return rollout.collect(env, env_params, spec, stage.dist, actor, state.params["actor"], state.obs_norm,
                               state.env, key, cfg.num_steps, run.env.clip_actions)

    @jax.jit
    def experience(state, hparams, key):
        return stage.experience(state.params["actor"], stage.networks.critic_params(state.params), state.obs_norm,
                                state.env, key, hparams, state.reward_norm)

    update = jax.jit(algo.update)
    return {"env_step": lambda: env_step(state.env.env_state, key),
            "rollout": lambda: collect(state, key),
            "experience": lambda: experience(state, hparams, key),
            "update": lambda: update(state, hparams, jnp.int32(1))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", nargs="*", default=[], help="CLI overrides (algo=ppo is implied)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--label", default="default", help="names the results file")
    parser.add_argument("--out", default=None, help="default experiments/results/bench_ppo_split/<label>.json")
    args = parser.parse_args(argv)
    import provenance

    stamp = provenance.stamp()
    import jax

    from bench_logging import compose
    from purejaxrl_opt.core import algos
    from purejaxrl_opt.core.stages.actor_critic import make_stage
    from purejaxrl_opt.host.settings import parse_settings

    overrides = ["algo=ppo", "logger=none", *args.set]
    run = parse_settings(compose(overrides)).run
    if run.algo.name != "ppo":
        raise SystemExit(f"algo={run.algo.name}: this benchmark splits PPO's update (algo=ppo)")
    env_tuple = algos.make_env(run)
    algo = algos.make_algorithm(run, env_tuple)
    stage = make_stage(run, *env_tuple)
    hparams = algo.default_hparams()
    start = time.perf_counter()
    state = jax.block_until_ready(algo.init(jax.random.PRNGKey(0), hparams))
    state, _ = jax.block_until_ready(jax.jit(algo.update)(state, hparams, 0))  # a trained state's shapes
    fns = pieces(algo, stage, state, hparams)
    compile_s = {}
    for name, fn in fns.items():
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        compile_s[name] = time.perf_counter() - t0
    rounds = {name: [] for name in fns}
    for _ in range(args.repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            rounds[name].append(time.perf_counter() - t0)
    best = {name: min(times) for name, times in rounds.items()}
    update = best["update"]
    shares = {"env_step": best["env_step"],
              "acting": max(best["rollout"] - best["env_step"], 0.0),
              "values_and_gae": max(best["experience"] - best["rollout"], 0.0),
              "epochs": max(update - best["experience"], 0.0)}
    batch = run.algo.num_envs * run.algo.num_steps
    label = args.label
    print(f"[bench_ppo_split] {label}: one update {update * 1e3:.0f} ms ({batch / update:,.0f} env steps/s, "
          f"{batch} env steps)", flush=True)
    for name, seconds in shares.items():
        print(f"  {name:15s} {seconds * 1e3:8.1f} ms  {100 * seconds / update:5.1f}%")
    entry = {**stamp, "label": label, "load_average": provenance.load_average(), "cpu_count": os.cpu_count(), "config": overrides,
             "num_envs": run.algo.num_envs, "num_steps": run.algo.num_steps,
             "update_epochs": run.algo.update_epochs, "num_minibatches": run.algo.num_minibatches,
             "network": {"recurrent": run.network.recurrent, "shared": run.network.shared,
                         "hidden_sizes": list(run.network.hidden_sizes)},
             "repeats": args.repeats, "seconds_best": best, "seconds_all": rounds, "compile_s": compile_s,
             "update_env_steps_per_s": batch / update,
             "split_s": shares, "split_share": {k: v / update for k, v in shares.items()},
             "setup_s": time.perf_counter() - start}
    out = Path(args.out or ROOT / "experiments" / "results" / "bench_ppo_split" / f"{label}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(entry, indent=2) + "\n")
    print(f"[bench_ppo_split] wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
