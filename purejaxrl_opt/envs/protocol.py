"""The one environment interface of the project, and the static spec built from it.

The interface is gymnax 1.x's per-env signature, which every rollout, evaluation, GRPO group rollout
and SFT reset already speaks; gymnax envs and the token envs are it as they are, and an adapter for
another library (``purejaxrl_opt/envs/<library>.py``) translates into it. An env object is a subclass
of ``gymnax.environments.environment.Environment`` (or anything with the same methods):

``reset_env(key, params) -> (obs, state)``
    No auto-reset.
``step_env(key, state, action, params) -> (obs, state, reward, terminated, info)``
    No auto-reset. ``terminated`` is a true terminal (no bootstrap) and never the time limit.
``is_truncated(state, params) -> bool``
    The episode's time limit is reached (gymnax: ``state.time >= params.max_steps_in_episode``).
``reset(key, params)``, ``step(key, state, action, params) -> (obs, state, reward, terminated,
truncated, info)``
    With auto-reset, ``info["final_observation"]`` = the observation *before* the reset (inherited
    from gymnax's ``Environment``, which calls ``step_env``, ``is_truncated`` and ``reset_env``).
``observation_space(params)``, ``action_space(params)``
    ``gymnax.environments.spaces.Box`` / ``Discrete``. An observation is ONE array per env (float32
    or an integer/bool dtype, the space's ``dtype``); adapters encode structured observations.
``params``
    A flax ``struct.dataclass`` with at least ``max_steps_in_episode: int``.

Optional attributes the layer reads (class attributes or properties):

``action_mask: bool = False``
    True: the LAST ``num_actions`` entries of the flattened observation are a 0/1 mask of the legal
    actions in that state (1 = legal).
``step_batch(keys [N], state [N], action [N], params) -> the 6-tuple of step, batched``
    A batch-level auto-reset (e.g. an optimistic reset that shares a few pre-sampled reset states
    across the batch). Absent: ``jax.vmap(env.step, in_axes=(0, 0, 0, None))``
    (:func:`purejaxrl_opt.envs.step_batch`).
``render_frame(state, params) -> uint8 [H, W, 3]``
    One frame of an unbatched state, for ``evaluate --gif``.
``render_in_jit: bool = True``
    ``render_frame`` can be traced (``jax.jit``); False: it runs on the host only (e.g. MuJoCo's
    OpenGL renderer), and ``evaluate --gif`` calls it with host (numpy) states.
``render_problem() -> str | None``
    Why ``render_frame`` cannot work on this machine (e.g. no OpenGL), or None; ``evaluate --gif``
    asks before it compiles anything.
``policy_obs_size: int | None = None``
    An asymmetric actor-critic (e.g. Playground's ``privileged_state`` critic): the observation is
    ``[P + C]``, the policy reads its first ``P = policy_obs_size`` entries and the critic the other
    ``C``; None: both read all of it.
``keyed_reset: bool = True``
    ``reset(key)`` fully determines the start state (GRPO's same-start groups need it).
``vocab: tuple[str, ...]``
    Token envs only: the token strings (the spec's ``vocab``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EnvSpec:
    """What the networks and rollouts need to know about an environment (static, hashable)."""

    env_id: str
    obs_shape: tuple[int, ...]
    discrete: bool
    num_actions: int  # categories if discrete, else action dimensions
    action_low: tuple[float, ...] | None
    action_high: tuple[float, ...] | None
    max_steps: int  # episode limit (time-limit truncation); 0 = none
    vocab: tuple[str, ...] | None = None  # token envs (envs/tokens.py): the token strings; else None
    obs_dtype: str = "float32"  # dtype of one observation, e.g. "float32", "uint8", "int32", "bool"
    # the last num_actions entries of the flattened observation are a 0/1 mask of the legal actions
    action_mask: bool = False
    library: str = "gymnax"  # the registry's library prefix of env_id (envs/registry.py)
    # reset(key) fully determines the start state (the env's keyed_reset; GRPO's same-start groups)
    keyed_reset: bool = True
    # asymmetric actor-critic: the policy reads the first policy_obs_size entries of the (1-D)
    # observation, the critic the rest; None = both read all of it (the env's policy_obs_size)
    policy_obs_size: int | None = None


def keyed_reset(env) -> bool:
    """Whether ``env.reset(key)`` fully determines the start state (protocol default: True)."""
    return bool(getattr(env, "keyed_reset", True))


def spec_of(env, env_params, env_id: str, library: str) -> EnvSpec:
    """The :class:`EnvSpec` of a protocol env: its spaces, ``params.max_steps_in_episode`` and the
    optional attributes.

    The observation's shape and dtype are those ``env.reset`` returns (``jax.eval_shape``: traced,
    not run), which must agree with ``observation_space``'s shape: gymnax's own spaces misstate the
    dtype of some envs (Catch-bsuite says int32 and returns float32, FourRooms-misc the reverse). An
    action space other than ``Discrete``/``Box`` is a ``ValueError``."""
    import jax
    from gymnax.environments import spaces

    obs = jax.eval_shape(env.reset, jax.random.PRNGKey(0), env_params)[0]
    obs_space = env.observation_space(env_params)
    if tuple(obs_space.shape) != tuple(obs.shape):
        raise ValueError(f"{env_id}: observation_space has shape {tuple(obs_space.shape)} but reset "
                         f"returns {tuple(obs.shape)}")
    space = env.action_space(env_params)
    if isinstance(space, spaces.Discrete):
        discrete, num_actions, low, high = True, int(space.n), None, None
    elif isinstance(space, spaces.Box):
        discrete = False
        num_actions = int(np.prod(space.shape))
        low = tuple(np.broadcast_to(np.asarray(space.low, np.float32), (num_actions,)).tolist())
        high = tuple(np.broadcast_to(np.asarray(space.high, np.float32), (num_actions,)).tolist())
    else:
        raise ValueError(f"{env_id}: unsupported action space {space!r} (the protocol's spaces are "
                         "gymnax's Discrete and Box)")
    action_mask = bool(getattr(env, "action_mask", False))
    if action_mask and not discrete:
        raise ValueError(f"{env_id}: action_mask = True needs a Discrete action space")
    max_steps = int(getattr(env_params, "max_steps_in_episode", 0) or 0)
    vocab = getattr(env, "vocab", None)
    policy_obs_size = getattr(env, "policy_obs_size", None)
    if policy_obs_size is not None and not (len(obs.shape) == 1 and 0 < policy_obs_size < obs.shape[0]):
        raise ValueError(f"{env_id}: policy_obs_size = {policy_obs_size} needs a 1-D observation longer "
                         f"than it (the critic reads the rest), got shape {tuple(obs.shape)}")
    return EnvSpec(env_id, tuple(int(d) for d in obs.shape), discrete, num_actions, low, high,
                   max_steps, tuple(vocab) if vocab is not None else None, np.dtype(obs.dtype).name,
                   action_mask, library, keyed_reset(env),
                   None if policy_obs_size is None else int(policy_obs_size))


class ResetWhereDone:
    """A mixin for adapters whose envs reset rarely (long episodes) or expensively (a physics
    ``forward``, a board generated): ``step_batch`` is ``jax.vmap(self.step)`` over ``keys [N]`` with
    the same numbers, but the batch's resets are computed only on steps where some env's episode
    ended. gymnax's ``step`` computes a reset on every step of every env and selects it where the
    episode ended. Needs the protocol's ``step_env``, ``reset_env`` and ``is_truncated``.

    Under a further vmap (lanes: seeds, swept hyperparameters) the lanes' envs are stepped as one flat
    batch of ``lanes x N`` envs (:func:`flat_over_lanes`), not a vmap of the ``N``-env step: each env's
    numbers are the same, the cond stays a cond (a vmapped cond is a select, and every step would run
    the resets), and XLA:CPU compiles one batch axis into much faster code than two (MJX physics)."""

    def step_batch(self, keys, state, action, params):
        return flat_over_lanes(self._step_batch)(keys, state, action, params)

    def _step_batch(self, keys, state, action, params):
        import jax
        import jax.numpy as jnp

        # gymnax's step: key_step, key_reset = split(key). Each half is taken where it is used: an env
        # whose step ignores its key (Playground, Jumanji) then splits no key on a step without an
        # end (XLA drops the unused half; the same keys, so the same numbers, as one split up front)
        step_keys = jax.vmap(lambda key: jax.random.split(key)[0])(keys)
        obs_st, state_st, reward, terminated, info = jax.vmap(self.step_env, in_axes=(0, 0, 0, None))(
            step_keys, state, action, params)
        truncated = jax.vmap(self.is_truncated, in_axes=(0, None))(state_st, params)
        done = jnp.logical_or(terminated, truncated)

        def _select(pick_reset, stepped):
            where = done.reshape(done.shape + (1,) * (stepped.ndim - 1))
            return jnp.where(where, pick_reset, stepped)

        def _reset(_):
            reset_keys = jax.vmap(lambda key: jax.random.split(key)[1])(keys)
            obs_re, state_re = jax.vmap(self.reset_env, in_axes=(0, None))(reset_keys, params)
            return jax.tree.map(_select, (obs_re, state_re), (obs_st, state_st))

        obs, state = jax.lax.cond(jnp.any(done), _reset, lambda _: (obs_st, state_st), None)
        info = {**info, "terminated": terminated, "truncated": truncated, "final_observation": obs_st}
        return obs, state, reward, terminated, truncated, info


def flat_over_lanes(batch_fn):
    """``batch_fn(keys [N], state [N], action [N], params)`` -- every output ``[N, ...]``, each env's
    outputs depending only on its own inputs -- as a function that, vmapped over ``L`` lanes, runs
    ``batch_fn`` once on the ``L x N`` envs flattened into one batch axis, instead of batching it again.
    The numbers are those of the vmap; only the program differs. Lanes whose ``params`` differ (a
    batched ``params`` leaf) fall back to the plain vmap."""
    import jax
    import jax.numpy as jnp
    from jax.custom_batching import custom_vmap

    @custom_vmap
    def fn(keys, state, action, params):
        return batch_fn(keys, state, action, params)

    @fn.def_vmap
    def _rule(axis_size, in_batched, keys, state, action, params):
        if any(jax.tree.leaves(in_batched[3])):
            in_axes = jax.tree.map(lambda batched: 0 if batched else None, tuple(in_batched))
            out = jax.vmap(batch_fn, in_axes=in_axes)(keys, state, action, params)
            return out, jax.tree.map(lambda _: True, out)
        num_envs = jax.tree.leaves(keys)[0].shape[1 if in_batched[0] else 0]

        def flatten(x, batched):
            x = x if batched else jnp.broadcast_to(x, (axis_size,) + x.shape)
            return x.reshape((axis_size * num_envs,) + x.shape[2:])

        flat = [jax.tree.map(flatten, arg, batched) for arg, batched in zip((keys, state, action), in_batched[:3])]
        out = fn(*flat, params)
        out = jax.tree.map(lambda x: x.reshape((axis_size, num_envs) + x.shape[1:]), out)
        return out, jax.tree.map(lambda _: True, out)

    return fn
