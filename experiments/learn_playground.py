"""PPO on MuJoCo Playground's CartpoleBalance against the uniform random policy, both measured the
same way: ``eval_episodes`` complete 1000-step episodes per seed lane (the run's final evaluation,
deterministic policy mode; the random policy: actions uniform in [-1, 1], the same env, the same
``evaluation.play_episodes`` episode loop).

    python experiments/learn_playground.py --seeds 1000 1001 --steps 500000 --out experiments/results/learn_playground

Writes ``<out>.json`` and ``<out>.md``. Report seeds are >= 1000; tuning seeds (if any) < 1000.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from purejaxrl_opt import envs
from purejaxrl_opt.core.stages import evaluation
from purejaxrl_opt.host import runner
from purejaxrl_opt.config.schema import EnvConfig, NetworkConfig, RunConfig
from purejaxrl_opt.core.algos.ppo import PPOConfig

import provenance


def ppo_config(args) -> RunConfig:
    algo = PPOConfig(num_envs=args.num_envs, num_steps=args.num_steps, update_epochs=args.epochs,
                     num_minibatches=args.minibatches, lr=args.lr, gamma=args.gamma, ent_coef=args.ent_coef)
    run = RunConfig(algo=algo, env=EnvConfig(id=args.env, normalize_obs=True,
                                             normalize_reward=args.normalize_reward),
                    network=NetworkConfig(), seed=args.seeds[0], num_seeds=len(args.seeds),
                    total_timesteps=args.steps, eval_episodes=args.eval_episodes)
    run.validate()
    return run


def random_returns(env_id: str, seed: int, episodes: int) -> np.ndarray:
    """Returns of the uniform random policy over ``episodes`` complete episodes (key ``PRNGKey(seed)``)."""
    env, env_params, spec = envs.make(env_id)
    dims = spec.num_actions

    def uniform(_params, obs):  # a "policy" whose sample is uniform on [-1, 1]^D
        return {"low": -jnp.ones(obs.shape[:-1] + (dims,)), "high": jnp.ones(obs.shape[:-1] + (dims,))}

    class Uniform:
        def sample(self, key, p):
            return jax.random.uniform(key, p["low"].shape, minval=-1.0, maxval=1.0)

        def mode(self, p):
            raise AssertionError("the random policy samples")

    play = jax.jit(lambda key: evaluation.play_episodes(env, env_params, spec, Uniform(), uniform, None, None,
                                                        key, episodes, deterministic=False))
    return np.asarray(play(jax.random.PRNGKey(seed)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env", default="playground/CartpoleBalance")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1000, 1001])
    parser.add_argument("--steps", type=int, default=500_000)
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--num-steps", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--minibatches", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--ent-coef", type=float, default=0.0)
    parser.add_argument("--normalize-reward", type=int, default=1)
    parser.add_argument("--eval-episodes", type=int, default=8)
    parser.add_argument("--out", default="experiments/results/learn_playground")
    args = parser.parse_args()
    assert all(s >= 1000 for s in args.seeds) or "tune" in args.out, "report seeds are >= 1000"

    run = ppo_config(args)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out_dir:
        result = runner.execute(run, out_dir, num_chunks=1)
    wall = time.perf_counter() - start
    trained = np.asarray(result.eval_returns)  # [lanes, eval_episodes]
    rand = np.stack([random_returns(args.env, s, args.eval_episodes) for s in args.seeds])
    commit = provenance.commit()
    record = {
        "env": args.env, "commit": commit, "command": "python " + " ".join(sys.argv),
        "seeds": args.seeds, "env_steps_per_seed": args.steps, "wall_s": round(wall, 1),
        "compile_s": result.summary.get("compile_seconds"), "config": vars(args),
        "ppo_final_return_per_seed": trained.mean(1).round(1).tolist(),
        "ppo_final_returns": trained.round(1).tolist(),
        "random_return_per_seed": rand.mean(1).round(1).tolist(),
        "random_returns": rand.round(1).tolist(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    lines = [f"# PPO on {args.env} vs the uniform random policy", "",
             f"commit `{commit}`; `{record['command']}`", "",
             f"{len(args.seeds)} seeds x {args.steps:,} env steps, wall {wall:.0f} s (compile included) "
             "on a loaded 2-core CPU; returns are the mean over "
             f"{args.eval_episodes} complete 1000-step episodes per seed (PPO: deterministic final policy).", "",
             "| seed | PPO final return | random policy return |", "|---|---|---|"]
    for s, p, r, ps, rs in zip(args.seeds, record["ppo_final_return_per_seed"], record["random_return_per_seed"],
                               trained, rand):
        lines.append(f"| {s} | {p:.1f} (episodes {ps.min():.1f}-{ps.max():.1f}) | "
                     f"{r:.1f} (episodes {rs.min():.1f}-{rs.max():.1f}) |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
