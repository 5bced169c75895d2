"""The random policy's return on a navix/jumanji env, measured the way training's final_return is
(evaluation.play_episodes: complete episodes through env.step, up to the episode limit), with uniform
logits: uniform over all actions, and on envs with action masks also uniform over the legal ones
(the masked head at zero logits, what an untrained masked policy is close to).

    python experiments/random_return_nj.py navix/Navix-Empty-8x8-v0 --episodes 1024
    python experiments/random_return_nj.py jumanji/Snake-v1 --params '{"max_steps_in_episode": 500}'

Prints and writes ``experiments/results/random_return_<library>_<name>.json`` (with its commit and
command: provenance.write_json); the suites read their random-policy references from it
(``reference: {file, key}``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from purejaxrl_opt import envs
from purejaxrl_opt.core.models.distributions import Categorical
from purejaxrl_opt.core.stages.evaluation import play_episodes
from purejaxrl_opt.core.models.networks import masked

import provenance


def random_returns(env_id: str, params: dict, episodes: int, seed: int, use_mask: bool) -> np.ndarray:
    env, env_params, spec = envs.make(env_id, params)

    def actor(_, obs):
        logits = jnp.zeros(obs.shape[:-len(spec.obs_shape)] + (spec.num_actions,))
        return {"logits": masked(spec, logits, obs) if use_mask else logits}

    run = jax.jit(lambda key: play_episodes(env, env_params, spec, Categorical(), actor, None, None, key,
                                            episodes, deterministic=False))
    return np.asarray(run(jax.random.PRNGKey(seed))), spec


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("env_id")
    parser.add_argument("--params", default="{}", help="env.params as JSON")
    parser.add_argument("--episodes", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    params = json.loads(args.params)
    result = {"env_id": args.env_id, "env_params": params, "episodes": args.episodes, "seed": args.seed}
    start = time.time()
    returns, spec = random_returns(args.env_id, params, args.episodes, args.seed, use_mask=False)
    result["uniform_all_actions"] = {"mean": float(returns.mean()), "std": float(returns.std()),
                                     "se": float(returns.std() / np.sqrt(len(returns)))}
    if spec.action_mask:
        returns, _ = random_returns(args.env_id, params, args.episodes, args.seed, use_mask=True)
        result["uniform_legal_actions"] = {"mean": float(returns.mean()), "std": float(returns.std()),
                                           "se": float(returns.std() / np.sqrt(len(returns)))}
    result["seconds"] = round(time.time() - start, 1)
    print(json.dumps(result, indent=1))
    library, name = args.env_id.split("/", 1)
    out = Path(args.out or Path(__file__).parent / "results" / f"random_return_{library}_{name}.json")
    provenance.write_json(out, result)  # the commit and this command line first, as every results file


if __name__ == "__main__":
    main()
