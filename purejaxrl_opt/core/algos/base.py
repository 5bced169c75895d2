"""What every algorithm shares: the training loop around its ``init``/``update`` and the final evaluation.

An algorithm is an :class:`Algorithm`: pure functions closed over a static config and env. This module
turns it into

* ``train(key, hparams=None) -> TrainOutput`` — the whole run as one traceable function
  (``jax.jit(train)(key)``; ``jax.vmap`` over keys and/or hyperparameters for seeds and sweeps);
* the same run in pieces — :func:`init_loop`, :func:`run_updates` (traced bounds, so one compile
  serves any chunk) and :func:`purejaxrl_opt.core.stages.evaluation.final_returns` — used by the runner for progress and
  checkpoints. ``train`` is exactly their composition.

Per-update metrics are written into a preallocated ``[num_updates]`` buffer in the loop state, so the
state alone is a complete checkpoint and no metrics leave the device until the caller asks. Env steps
are counted in unsigned 32-bit integers (exact to 2^32 - 2 per lane); in the buffer the cumulative
``env_steps`` of an update a lane did not run is :data:`NOT_RUN`, and :func:`host_metrics` turns the
buffer into host arrays with ``env_steps`` as float64 (exact) and NaN for those rows. An
algorithm with a budget of real env steps (``Algorithm.lane_active``, GRPO) runs a ``while_loop``
instead: ``num_updates`` is then the buffer's size, and rows of updates a lane did not run stay NaN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.custom_batching import custom_vmap

from purejaxrl_opt.core.stages import evaluation
from purejaxrl_opt.config.schema import RunConfig, hyperparameters
from purejaxrl_opt.core.models.distributions import Distribution
from purejaxrl_opt.envs import EnvSpec, eval_params
from purejaxrl_opt.core.models.policies import Policy

Hyperparameters = dict[str, jnp.ndarray]

# env-step counters: uint32, exact to 2^32 - 2 env steps per lane (2^32 - 1 marks "not run");
# float32 is exact only to 2^24
STEP_DTYPE = jnp.uint32
# the metrics buffer's env_steps for an update that a lane did not run (float metrics hold NaN)
NOT_RUN = np.uint32(np.iinfo(np.uint32).max)


def host_metrics(metrics: dict) -> dict:
    """The metrics buffer on the host: numpy arrays, ``env_steps`` as float64 (exact) with NaN for
    the updates a lane did not run (:data:`NOT_RUN`); every other metric unchanged (float32, NaN)."""
    out = {name: np.asarray(value) for name, value in metrics.items()}
    if "env_steps" in out and np.issubdtype(out["env_steps"].dtype, np.integer):
        steps = out["env_steps"]
        out["env_steps"] = np.where(steps == NOT_RUN, np.nan, steps.astype(np.float64))
    return out


@dataclass(frozen=True)
class Algorithm:
    """The parts that make one algorithm different; everything else lives here and in rollout.py.

    * ``init(key, hparams) -> state``
    * ``update(state, hparams, update_idx) -> (state, metrics)``; ``metrics`` holds scalars for every
      name in ``metric_names`` plus ``env_steps`` (real env steps consumed by this update, an integer).
    * ``policy``: the policy network as a :class:`purejaxrl_opt.core.models.policies.Policy` bundle (``apply``
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
    # state -> bool scalar: may this lane run another update? None: every lane runs all
    # ``num_updates`` (a fixed-count loop). Set (a budget of real env steps, GRPO): the lane runs
    # while it is true, ``num_updates`` only bounds the metrics buffer (see run_updates)
    lane_active: Callable[[Any], jnp.ndarray] | None = None
    # with ``lane_active``: updates run between two tests of the loop's condition (a static int >= 1).
    # A GPU copies each test's predicate to the host and waits for it (a sync per test); with k > 1 the
    # loop tests once per block of k updates, masking those past the budget (at most k - 1 wasted
    # updates at the end). The numbers are the same for every k (run_budgeted_updates).
    check_every: int = 1

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
    env_steps: jnp.ndarray  # uint32 scalar: env steps consumed so far (exact to 2^32 - 2)
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
    metrics["env_steps"] = jnp.full((algo.num_updates,), NOT_RUN, STEP_DTYPE)
    return Loop(algo.init(init_key, hparams), hparams, jnp.zeros((), jnp.int32),
                jnp.zeros((), STEP_DTYPE), eval_key, metrics)


def _one_update(algo: Algorithm, loop: Loop, update_idx) -> tuple[Any, dict]:
    """One update of ``loop``'s state: ``(state, metrics)`` with the cumulative ``env_steps`` and, every
    ``eval_every`` updates, the periodic evaluation (NaN otherwise). ``update_idx`` must be shared by
    all lanes (unbatched under ``vmap``), so the evaluation is a real branch, not a ``select``."""
    state, step_metrics = algo.update(loop.algo_state, loop.hparams, update_idx)
    step_metrics["env_steps"] = loop.env_steps + step_metrics.pop("env_steps").astype(STEP_DTYPE)
    eval_names = algo.eval_metric_names
    if eval_names:
        step_metrics.update(jax.lax.cond(
            (update_idx + 1) % algo.run.eval_every == 0,
            lambda: evaluation.periodic_metrics(algo, state, jax.random.fold_in(loop.eval_key, update_idx)),
            lambda: {n: jnp.full((), jnp.nan, jnp.float32) for n in eval_names}))
    return state, step_metrics


def run_updates(algo: Algorithm, loop: Loop, start: jnp.ndarray | int, stop: jnp.ndarray | int) -> Loop:
    """Run updates ``start .. stop-1`` (``stop`` clamped to the total); the bounds may be traced.

    The bounds are plain scalars shared by all lanes (``in_axes=None`` under ``vmap``): a per-lane
    loop bound would turn the loop into a masked one that selects the whole state every update.
    ``start`` must equal ``loop.update_idx``.
    """
    stop = jnp.minimum(stop, algo.num_updates)

    def _update_step(update_idx, loop: Loop) -> Loop:
        state, step_metrics = _one_update(algo, loop, update_idx)
        env_steps = step_metrics["env_steps"]
        metrics = {n: loop.metrics[n].at[update_idx].set(step_metrics[n].astype(loop.metrics[n].dtype))
                   for n in loop.metrics}
        return loop.replace(algo_state=state, update_idx=loop.update_idx + 1, env_steps=env_steps,
                            metrics=metrics)

    if algo.lane_active is not None:
        return run_budgeted_updates(algo, loop, start, stop)
    return jax.lax.fori_loop(start, stop, _update_step, loop)


@custom_vmap
def any_lane(active: jnp.ndarray) -> jnp.ndarray:
    """``active`` itself; under ``vmap`` (lanes), whether it is true in any lane, *unbatched*.

    A ``while_loop`` whose predicate differs per lane becomes, under ``vmap``, a loop that selects its
    whole carry (metrics buffers included) every iteration, and every ``lax.cond`` inside it a
    ``select`` running both branches; with this predicate it stays an ordinary loop with a shared
    counter, and lanes that are done keep their state by a ``where`` on the small parts.
    """
    return active


@any_lane.def_vmap
def _any_lane_vmap(axis_size, in_batched, active):
    del axis_size
    return (jnp.any(active, axis=0) if in_batched[0] else active), False


def run_budgeted_updates(algo: Algorithm, loop: Loop, start: jnp.ndarray | int,
                         stop: jnp.ndarray | int) -> Loop:
    """:func:`run_updates` for an algorithm with ``lane_active``: updates ``start, start+1, ...``
    while ``update < stop`` and some lane is active.

    An update of a lane that is no longer active (its budget spent) changes nothing: state,
    ``update_idx`` and ``env_steps`` keep their values and its metrics row stays NaN. Lanes become
    inactive for good (the budget only grows), so an active lane's ``update_idx`` always equals the
    shared counter, and chunks of updates compose to the same numbers as one loop. The loop ends
    once every lane is done, so updates past the budget cost nothing.

    ``algo.check_every = k > 1``: the loop tests its condition once per block of ``k`` updates (a
    loop of static length, which XLA:GPU runs without reading a predicate back), masking the
    updates past ``stop`` or a lane's budget like those of a done lane; the last block computes up
    to ``k - 1`` masked updates for nothing. Every value equals the ``k = 1`` loop's. (With
    ``eval_every``, the periodic evaluation's branch is still one test per update.)
    """
    stop = jnp.minimum(stop, algo.num_updates)

    def _cond(carry):
        update_idx, loop = carry
        return jnp.logical_and(update_idx < stop, any_lane(algo.lane_active(loop.algo_state)))

    def _masked_update(update_idx, loop: Loop, active) -> Loop:
        # update_idx is unbatched (any_lane): the periodic evaluation stays a real branch under vmap.
        # Indices past the buffer occur only in masked steps of a block: the scatter drops them.
        state, step_metrics = _one_update(algo, loop, update_idx)
        env_steps = step_metrics["env_steps"]
        metrics = {n: loop.metrics[n].at[update_idx].set(
            jnp.where(active, step_metrics[n].astype(loop.metrics[n].dtype),
                      NOT_RUN if n == "env_steps" else jnp.nan), mode="drop") for n in loop.metrics}
        state = jax.tree_util.tree_map(lambda new, old: jnp.where(active, new, old), state,
                                       loop.algo_state)
        return loop.replace(
            algo_state=state, update_idx=jnp.where(active, loop.update_idx + 1, loop.update_idx),
            env_steps=jnp.where(active, env_steps, loop.env_steps), metrics=metrics)

    def _body(carry):
        update_idx, loop = carry
        return update_idx + 1, _masked_update(update_idx, loop, algo.lane_active(loop.algo_state))

    start = jnp.asarray(start, jnp.int32)
    if algo.check_every == 1:
        return jax.lax.while_loop(_cond, _body, (start, loop))[1]

    def _block_step(_, carry):
        update_idx, loop = carry
        active = jnp.logical_and(algo.lane_active(loop.algo_state), update_idx < stop)
        return update_idx + 1, _masked_update(update_idx, loop, active)

    # blocks of check_every updates, each a loop of static length (no test inside); the outer loop
    # tests once per block
    return jax.lax.while_loop(
        _cond, lambda carry: jax.lax.fori_loop(0, algo.check_every, _block_step, carry),
        (start, loop))[1]


def make_train(algo: Algorithm) -> Callable[..., TrainOutput]:
    """``train(key, hparams=None)``: init, all updates, final evaluation — one traceable function."""

    def train(key: jax.Array, hparams: Hyperparameters | None = None) -> TrainOutput:
        loop = init_loop(algo, key, hparams)
        loop = run_updates(algo, loop, 0, algo.num_updates)
        return TrainOutput(loop, loop.metrics, evaluation.final_returns(algo, loop))

    return train
