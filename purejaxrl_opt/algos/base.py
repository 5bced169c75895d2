"""What every algorithm shares: the training loop around its ``init``/``update`` and the final evaluation.

An algorithm is an :class:`Algorithm`: pure functions closed over a static config and env. This module
turns it into

* ``train(key, hparams=None) -> TrainOutput`` — the whole run as one traceable function
  (``jax.jit(train)(key)``; ``jax.vmap`` over keys and/or hyperparameters for seeds and sweeps);
* the same run in pieces — :func:`init_loop`, :func:`run_updates` (traced bounds, so one compile
  serves any chunk) and :func:`purejaxrl_opt.evaluation.final_returns` — used by the runner for progress and
  checkpoints. ``train`` is exactly their composition.

Per-update metrics are written into a preallocated ``[num_updates]`` buffer in the loop state, so the
state alone is a complete checkpoint and no metrics leave the device until the caller asks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from purejaxrl_opt import evaluation
from purejaxrl_opt.config import RunConfig, hyperparameters
from purejaxrl_opt.distributions import Distribution
from purejaxrl_opt.envs import EnvSpec, eval_params
from purejaxrl_opt.policies import Policy

Hyperparameters = dict[str, jnp.ndarray]


@dataclass(frozen=True)
class Algorithm:
    """The parts that make one algorithm different; everything else lives here and in rollout.py.

    * ``init(key, hparams) -> state``
    * ``update(state, hparams, update_idx) -> (state, metrics)``; ``metrics`` holds scalars for every
      name in ``metric_names`` plus ``env_steps`` (env steps consumed by this update).
    * ``policy``: the policy network as a :class:`purejaxrl_opt.policies.Policy` bundle (``apply``
      one observation at a time, ``start``/``advance`` acting through an episode with a carry,
      ``episode_apply`` re-scoring whole episodes);
    * ``policy_params(state) -> (actor_params, obs_norm_state_or_None)``: what ``policy`` is applied
      with (evaluation, checkpoints' evaluate CLI).
    """

    run: RunConfig
    env: Any
    env_params: Any
    spec: EnvSpec
    dist: Distribution
    policy: Policy
    init: Callable[[jax.Array, Hyperparameters], Any]
    update: Callable[[Any, Hyperparameters, jnp.ndarray], tuple[Any, dict]]
    policy_params: Callable[[Any], tuple[Any, Any]]
    metric_names: tuple[str, ...]
    num_updates: int
    param_fn: Callable[[Any], Any]  # state -> every trained parameter (for num_params, checkpoints)

    def default_hparams(self) -> Hyperparameters:
        return hyperparameters(self.run.algo)

    @property
    def eval_env_params(self):
        """Evaluation env params: held-out prompts on token envs, the training params otherwise."""
        return eval_params(self.spec, self.env_params)

    @property
    def eval_metric_names(self) -> tuple[str, ...]:
        """Metrics of the periodic evaluation (``run.eval_every > 0``), in the metrics buffer."""
        if self.run.eval_every <= 0:
            return ()
        if self.spec.vocab is not None:
            return ("eval_return", "eval_accuracy", "eval_accuracy_sampled") + evaluation.pass_at_k_names(
                self.run)
        return ("eval_return",)


@struct.dataclass
class Loop:
    """Complete training state of one agent: a checkpoint of it is enough to resume bitwise."""

    algo_state: Any
    hparams: Hyperparameters
    update_idx: jnp.ndarray  # int32 scalar: updates done
    env_steps: jnp.ndarray  # float32 scalar: env steps consumed so far (exact below 2^24 per update)
    eval_key: jax.Array
    metrics: dict  # name -> [num_updates] float32, row i written by update i


class TrainOutput(NamedTuple):
    loop: Loop
    metrics: dict  # name -> [num_updates]
    eval_returns: jnp.ndarray  # [eval_episodes]


def init_loop(algo: Algorithm, key: jax.Array, hparams: Hyperparameters | None = None) -> Loop:
    hparams = algo.default_hparams() if hparams is None else hparams
    init_key, eval_key = jax.random.split(key)
    names = ("env_steps",) + algo.metric_names + algo.eval_metric_names
    metrics = {n: jnp.full((algo.num_updates,), jnp.nan, jnp.float32) for n in names}
    return Loop(algo.init(init_key, hparams), hparams, jnp.zeros((), jnp.int32),
                jnp.zeros((), jnp.float32), eval_key, metrics)


def run_updates(algo: Algorithm, loop: Loop, start: jnp.ndarray | int, stop: jnp.ndarray | int) -> Loop:
    """Run updates ``start .. stop-1`` (``stop`` clamped to the total); the bounds may be traced.

    The bounds are plain scalars shared by all lanes (``in_axes=None`` under ``vmap``): a per-lane
    loop bound would turn the loop into a masked one that selects the whole state every update.
    ``start`` must equal ``loop.update_idx``.
    """
    stop = jnp.minimum(stop, algo.num_updates)
    every = algo.run.eval_every
    eval_names = algo.eval_metric_names

    def _update_step(update_idx, loop: Loop) -> Loop:
        state, step_metrics = algo.update(loop.algo_state, loop.hparams, update_idx)
        env_steps = loop.env_steps + step_metrics.pop("env_steps")
        step_metrics["env_steps"] = env_steps
        if eval_names:
            # a real branch under vmap: update_idx is shared by all lanes
            step_metrics.update(jax.lax.cond(
                (update_idx + 1) % every == 0,
                lambda: evaluation.periodic_metrics(algo, state, jax.random.fold_in(loop.eval_key, update_idx)),
                lambda: {n: jnp.full((), jnp.nan, jnp.float32) for n in eval_names}))
        metrics = {n: loop.metrics[n].at[update_idx].set(step_metrics[n].astype(jnp.float32))
                   for n in loop.metrics}
        return loop.replace(algo_state=state, update_idx=loop.update_idx + 1, env_steps=env_steps,
                            metrics=metrics)

    return jax.lax.fori_loop(start, stop, _update_step, loop)


def make_train(algo: Algorithm) -> Callable[..., TrainOutput]:
    """``train(key, hparams=None)``: init, all updates, final evaluation — one traceable function."""

    def train(key: jax.Array, hparams: Hyperparameters | None = None) -> TrainOutput:
        loop = init_loop(algo, key, hparams)
        loop = run_updates(algo, loop, 0, algo.num_updates)
        return TrainOutput(loop, loop.metrics, evaluation.final_returns(algo, loop))

    return train
