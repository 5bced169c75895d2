"""PureJaxRL's own ``purejaxrl/ppo.py``, unmodified, timed in its own process: the peer of
experiments/throughput_one_agent.py (one agent, ours vs theirs on the same CPU).

    git clone https://github.com/luchris429/purejaxrl experiments/peers/purejaxrl
    git -C experiments/peers/purejaxrl checkout 31756b1
    python experiments/peer_purejaxrl.py --checkout experiments/peers/purejaxrl --config cartpole --num-envs 4 \
        --json /tmp/purejaxrl_cartpole.json

``make_train`` is imported from ``<checkout>/purejaxrl/ppo.py`` (its directory goes on ``sys.path``,
as its own ``from wrappers import ...`` needs); nothing of this project is imported before it
trains (provenance is stamped after). Every setting is one of PureJaxRL's own config keys:

* ``cartpole``: the config of ``ppo.py``'s ``__main__`` (4 envs x 128 steps, 5e5 env steps, 4 epochs
  x 4 minibatches, lr 2.5e-4 annealed, tanh 64x64) with ``DEBUG`` False (its per-update print
  callback is a config key, off for timing); ``--num-envs`` changes ``NUM_ENVS`` only;
* ``minatar``: the MinAtar config of PureJaxRL's ``examples/brax_minatar.ipynb`` (64 envs x 128 steps,
  4 epochs x 8 minibatches, lr 5e-3 annealed, relu), whose network is ``ppo.py``'s own (64x64 MLP on
  the flattened image, ``FlattenObservationWrapper``: PureJaxRL has no conv torso), with
  ``ENV_NAME`` Breakout-MinAtar (the notebook names SpaceInvaders-MinAtar) and ``TOTAL_TIMESTEPS``
  from ``--total-timesteps`` (the notebook's 1e7 takes many minutes on 2 cores).

The one adapter: PureJaxRL at that commit was written for gymnax 0.0.x, whose ``Environment.step``
returns ``(obs, state, reward, done, info)``; the project's pin, gymnax 1.0.1, returns ``terminated``
and ``truncated`` apart (six values), which ``purejaxrl/wrappers.py`` cannot unpack. So while
``make_train`` builds its env, ``gymnax.make`` hands it the env behind :class:`FiveValueStep`, whose
``step`` returns the old five, ``done = terminated or truncated`` (the old API's meaning; the step
and its auto-reset are gymnax's own); PureJaxRL's files themselves run as they are.

Timing: ``jax.jit(make_train(config)).lower(key).compile()`` (compile s), then the compiled call with
``block_until_ready`` (run s); env steps/s = ``NUM_UPDATES * NUM_STEPS * NUM_ENVS / run s``. Final
return: the mean return of the episodes that ended in the last 5% of updates (at least one update),
from PureJaxRL's own ``returned_episode`` / ``returned_episode_returns`` metrics (our side reads the
same quantity from its ``return_mean`` / ``episodes`` metrics).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

COMMIT = "31756b1"  # the PureJaxRL commit the comparison was made against
CARTPOLE = {"LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 5e5, "UPDATE_EPOCHS": 4,
            "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
            "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1",
            "ANNEAL_LR": True, "DEBUG": False}
MINATAR = {"LR": 5e-3, "NUM_ENVS": 64, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 1e7, "UPDATE_EPOCHS": 4,
           "NUM_MINIBATCHES": 8, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
           "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "relu", "ENV_NAME": "Breakout-MinAtar",
           "ANNEAL_LR": True, "DEBUG": False}
CONFIGS = {"cartpole": CARTPOLE, "minatar": MINATAR}
LAST_FRACTION = 0.05  # the final return: episodes that ended in this last fraction of updates


def peer_config(name: str, num_envs: int | None = None, total_timesteps: float | None = None) -> dict:
    """PureJaxRL's config ``name`` (a key of :data:`CONFIGS`) with ``NUM_ENVS`` / ``TOTAL_TIMESTEPS``
    replaced where given."""
    if name not in CONFIGS:
        raise SystemExit(f"--config {name!r}: allowed {sorted(CONFIGS)}")
    config = dict(CONFIGS[name])
    if num_envs is not None:
        config["NUM_ENVS"] = num_envs
    if total_timesteps is not None:
        config["TOTAL_TIMESTEPS"] = float(total_timesteps)
    return config


def ppo_file(checkout: str | Path) -> Path:
    """``<checkout>/purejaxrl/ppo.py``; a clear exit naming how to get it where it is missing."""
    path = Path(checkout) / "purejaxrl" / "ppo.py"
    if not path.is_file():
        raise SystemExit(f"no PureJaxRL checkout at {checkout} ({path} is missing); get it with\n"
                         f"  git clone https://github.com/luchris429/purejaxrl {checkout}\n"
                         f"  git -C {checkout} checkout {COMMIT}")
    return path


class FiveValueStep:
    """A gymnax 1.0 env whose ``step`` returns gymnax 0.0's five values (see the module docstring);
    everything else is the env's own."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    def step(self, key, state, action, params=None):
        import jax.numpy as jnp

        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        return obs, state, reward, jnp.logical_or(terminated, truncated), info


@contextlib.contextmanager
def five_value_gymnax():
    """Within it, ``gymnax.make`` gives :class:`FiveValueStep` envs (``ppo.py``'s ``make_train`` calls
    it once, at once); other code in the process keeps gymnax's own API."""
    import gymnax

    make = gymnax.make

    def five_value_make(*args, **kwargs):
        env, env_params = make(*args, **kwargs)
        return FiveValueStep(env), env_params

    gymnax.make = five_value_make
    try:
        yield
    finally:
        gymnax.make = make


def make_peer_train(ppo_path: Path, config: dict):
    """PureJaxRL's ``make_train(config)`` from ``ppo_path`` (its directory put on ``sys.path``)."""
    if str(ppo_path.parent) not in sys.path:
        sys.path.insert(0, str(ppo_path.parent))
    from ppo import make_train

    with five_value_gymnax():
        return make_train(config)


def final_return(returned, returns, fraction: float = LAST_FRACTION) -> tuple[float, int]:
    """``(mean return, episodes)`` of the episodes that ended in the last ``fraction`` of updates;
    ``returned`` / ``returns`` are PureJaxRL's ``[updates, steps, envs]`` metrics."""
    import numpy as np

    returned, returns = np.asarray(returned), np.asarray(returns)
    last = max(1, int(round(returned.shape[0] * fraction)))
    mask = returned[-last:].astype(bool)
    count = int(mask.sum())
    return (float(returns[-last:][mask].mean()) if count else float("nan")), count


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", required=True, help="a PureJaxRL checkout (at commit %s)" % COMMIT)
    parser.add_argument("--config", default="cartpole", choices=sorted(CONFIGS))
    parser.add_argument("--num-envs", type=int, default=None)
    parser.add_argument("--total-timesteps", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0, help="jax.random.PRNGKey(seed)")
    parser.add_argument("--json", required=True, help="where the record is written")
    args = parser.parse_args(argv)
    ppo_path = ppo_file(args.checkout)
    config = peer_config(args.config, args.num_envs, args.total_timesteps)
    load_before = [round(x, 2) for x in os.getloadavg()]
    import jax

    given = dict(config)
    train = make_peer_train(ppo_path, config)  # adds NUM_UPDATES and MINIBATCH_SIZE to config
    key = jax.random.PRNGKey(args.seed)
    start = time.perf_counter()
    compiled = jax.jit(train).lower(key).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    out = jax.block_until_ready(compiled(key))
    run_s = time.perf_counter() - start
    updates = int(config["NUM_UPDATES"])
    env_steps = updates * config["NUM_STEPS"] * config["NUM_ENVS"]
    metrics = out["metrics"]
    ret, episodes = final_return(metrics["returned_episode"], metrics["returned_episode_returns"])

    import provenance  # after training: nothing of this project ran before

    record = {"side": "purejaxrl", "purejaxrl_commit": provenance.checkout_commit(args.checkout) or COMMIT,
              "checkout": str(args.checkout), "config_name": args.config, "config": given,
              "seed": args.seed, "num_updates": updates, "env_steps": env_steps,
              "compile_s": round(compile_s, 3), "run_s": round(run_s, 4),
              "env_steps_per_s": round(env_steps / run_s, 1), "final_return": ret,
              "final_return_episodes": episodes, "final_return_what":
              f"mean return of the episodes that ended in the last {LAST_FRACTION:.0%} of updates",
              "xla_flags": os.environ.get("XLA_FLAGS", ""), "jax": jax.__version__,
              "load_avg_before": load_before, "load_avg_after": provenance.load_average()}
    provenance.write_json(args.json, record)
    print(f"purejaxrl {args.config} {config['NUM_ENVS']} envs: {record['env_steps_per_s']:,.0f} env steps/s, "
          f"compile {compile_s:.2f} s, run {run_s:.2f} s, final return {ret:.1f} ({episodes} episodes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
