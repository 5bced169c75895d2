"""Craftax (``craftax`` 1.6.x): Craftax-Classic and Craftax, symbolic and pixel observations.

Ids (``env.id = "craftax/<name>"``): ``Craftax-Classic-Symbolic-v1``, ``Craftax-Classic-Pixels-v1``,
``Craftax-Symbolic-v1``, ``Craftax-Pixels-v1``.

What the adapter changes against the library (``make_craftax_env_from_name(name, auto_reset=False)``):

- **termination and truncation apart.** Craftax's ``done`` is ``is_game_over``: the time limit
  (``state.timestep >= params.max_timesteps``) OR a true terminal (Classic: the player's health <= 0 or
  standing in lava; full Craftax: health <= 0 or the final boss beaten). ``terminated`` here is the
  library's own ``is_terminal`` evaluated with the time limit lifted, so it is exactly the library's
  terminal conditions without the limit; ``truncated`` (``is_truncated``) is the limit alone. A death
  on the last step is ``terminated`` (and also ``truncated``); GAE bootstraps only where not
  ``terminated``.
- **no library auto-reset.** Craftax's auto-reset env regenerates a world (``generate_world``) on
  every step whether or not the episode ended (~1.3k steps/s for 64 envs on 2 CPU cores against
  ~7.5k without). Per-env ``step`` is gymnax's (same cost, kept for GRPO's group rollouts and
  evaluation); batch rollouts use :meth:`Craftax.step_batch`, an optimistic reset.
- **observations.** Symbolic: the library's flat float32 vector in [0, 1] (Classic 1345 entries,
  full Craftax 8268). Pixels: the library's agent view, a float32 ``[H, W, 3]`` image in [0, 1]
  (Classic 63 x 63 x 3, full Craftax 130 x 110 x 3), kept as an image for the CNN torso.
- **info.** ``info["achievements"]``: bool ``[A]`` (Classic 22, full 67), the achievements unlocked so
  far in the episode, taken after the step and before any reset, so on a ``done`` step they are that
  episode's. Craftax's score is ``exp(mean(log(1 + 100 * a))) - 1`` over the mean success rate ``a``
  of each achievement. The library's per-achievement float entries are not passed on.
- **params.** :class:`CraftaxParams` holds the library's ``EnvParams`` (``inner``); its episode limit
  is ``inner.max_timesteps`` (Classic 10,000, full 100,000), exposed as ``max_steps_in_episode``.

Options (``env.params``): every field of the library's ``EnvParams`` (``max_timesteps``,
``day_length``, ...; ``max_steps_in_episode`` is accepted as another name of ``max_timesteps``) and
``reset_ratio`` (static, default 16 as Craftax_Baselines' PPO: ``step_batch`` on ``N`` envs generates
``max(1, N // reset_ratio)`` worlds per step; 1 = one world per env, i.e. a plain per-env reset).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import spaces
from gymnax.environments.environment import Environment

from craftax.craftax_env import make_craftax_env_from_name

from purejaxrl_opt.envs.options import Option, check
from purejaxrl_opt.config.errors import ConfigError

LIBRARY = "craftax"
_IDS = ("Craftax-Classic-Symbolic-v1", "Craftax-Classic-Pixels-v1", "Craftax-Symbolic-v1",
        "Craftax-Pixels-v1")
DEFAULT_RESET_RATIO = 16  # Craftax_Baselines ppo.py: reset_ratio = min(16, num_envs)
# Block size of render_frame (the library's BLOCK_PIXEL_SIZE_IMG): Classic 144 x 144, full 208 x 176
_FRAME_BLOCK_PIXELS = 16
_NO_LIMIT = np.iinfo(np.int32).max


def ids() -> tuple[str, ...]:
    return _IDS


@struct.dataclass
class CraftaxParams:
    """The library's ``EnvParams`` (``inner``); the episode limit is ``inner.max_timesteps``."""

    inner: Any

    @property
    def max_steps_in_episode(self):
        return self.inner.max_timesteps


class Craftax(Environment):
    """A Craftax env in the project's protocol (gymnax 1.x signature; see the module docstring)."""

    keyed_reset = True
    action_mask = False

    def __init__(self, name: str, reset_ratio: int = DEFAULT_RESET_RATIO):
        super().__init__()
        self.env_name = name
        self.reset_ratio = int(reset_ratio)
        self._env = make_craftax_env_from_name(name, auto_reset=False)
        self.classic = name.startswith("Craftax-Classic")
        self.pixels = "Pixels" in name
        self._frame_renderer = None

    @property
    def name(self) -> str:
        return self.env_name

    @property
    def default_params(self) -> CraftaxParams:
        return CraftaxParams(self._env.default_params)

    @property
    def num_actions(self) -> int:
        return int(self._env.num_actions)

    # ------------------------------------------------------------------ per-env protocol
    def reset_env(self, key: jax.Array, params: CraftaxParams):
        obs, state = self._env.reset_env(key, params.inner)
        return obs.astype(jnp.float32), state

    def step_env(self, key: jax.Array, state, action, params: CraftaxParams):
        obs, state, reward, _done, _info = self._env.step_env(key, state, action, params.inner)
        # the library's terminal conditions with the time limit lifted: death (and lava / the boss)
        terminated = self._env.is_terminal(state, params.inner.replace(max_timesteps=_NO_LIMIT))
        info = {"achievements": state.achievements.astype(bool)}
        return (obs.astype(jnp.float32), state, jnp.asarray(reward, jnp.float32),
                jnp.asarray(terminated, bool), info)

    def is_truncated(self, state, params: CraftaxParams) -> jax.Array:
        return state.timestep >= params.inner.max_timesteps

    def is_terminated(self, state, params: CraftaxParams) -> jax.Array:
        return self._env.is_terminal(state, params.inner.replace(max_timesteps=_NO_LIMIT))

    # ------------------------------------------------------------------ batch auto-reset
    def num_resets(self, num_envs: int) -> int:
        """Worlds generated per :meth:`step_batch` step for ``num_envs`` envs."""
        return max(1, num_envs // self.reset_ratio)

    def step_batch(self, keys: jax.Array, state, action: jax.Array, params: CraftaxParams):
        """Step ``N`` envs with an optimistic reset: ``keys, action [N]``, ``state`` batched ``[N]``.

        Returns gymnax's 6-tuple batched, ``info["final_observation"]`` the pre-reset observation, and
        ``info["reset_index"] [N]`` (int32): the pool world an env that ended received.

        Every env ``i`` splits its key into ``(step_key_i, reset_key_i)`` exactly as gymnax's
        ``Environment.step`` does, and steps with ``step_key_i``. Then ``R = max(1, N // reset_ratio)``
        worlds are generated, world ``k`` by the library's reset under ``reset_key_k`` (``k < R``);
        the ``j``-th env that ended in this step (in env order, ``j = 0, 1, ...``) starts world
        ``j mod R``. With ``R >= N`` (``reset_ratio = 1``) every env that ended starts the world of its
        own reset key: the result equals ``vmap(env.step)``.

        Why the start worlds stay unbiased: world ``k`` comes from ``reset_key_k``, a fresh key that
        nothing else in the step uses (the other half of the split drove env ``k``'s own step), so
        the worlds are independent draws from the reset distribution, independent of which envs
        ended; whichever world an ended env receives is therefore exactly distributed as the
        library's reset (assigning by rank is, in distribution, the same as Craftax_Baselines'
        random choice). What changes is only independence *between* envs: when more than ``R`` envs
        end in the same step, some of them start the same world (``j`` and ``j + R`` share one), and
        their episodes are correlated. Craftax episodes last hundreds to thousands of steps, so with
        ``N = 64, R = 4`` a step rarely ends more than 4 episodes: a uniformly random policy's
        episodes last ~155 steps (measured: 0.41 ends per step at 64 envs), so more than 4 ends in
        one step has probability ~6e-5 (Poisson), and a trained agent lives longer. Cost: ``R`` world generations per step instead of
        ``N``; when no env ended, none (``lax.cond``; under ``vmap`` over seeds the cond becomes a
        select and the ``R`` worlds are always generated).
        """
        num_envs = keys.shape[0]
        num_resets = min(self.num_resets(num_envs), num_envs)
        split = jax.vmap(jax.random.split)(keys)
        step_keys, reset_keys = split[:, 0], split[:, 1]
        obs_st, state_st, reward, terminated, info = jax.vmap(
            self.step_env, in_axes=(0, 0, 0, None))(step_keys, state, action, params)
        truncated = jax.vmap(self.is_truncated, in_axes=(0, None))(state_st, params)
        done = jnp.logical_or(terminated, truncated)
        reset = jax.vmap(self.reset_env, in_axes=(0, None))
        if num_resets >= num_envs:
            index = jnp.arange(num_envs, dtype=jnp.int32)
            obs_re, state_re = reset(reset_keys, params)
        else:
            index = jnp.where(done, (jnp.cumsum(done) - 1) % num_resets, 0).astype(jnp.int32)
            pool_keys = reset_keys[:num_resets]
            empty = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                                 jax.eval_shape(reset, pool_keys, params))
            obs_pool, state_pool = jax.lax.cond(jnp.any(done), lambda: reset(pool_keys, params),
                                                lambda: empty)
            obs_re = obs_pool[index]
            state_re = jax.tree.map(lambda x: x[index], state_pool)

        def _select(reset_leaf, step_leaf):
            cond = done.reshape(done.shape + (1,) * (step_leaf.ndim - 1))
            return jnp.where(cond, reset_leaf, step_leaf)

        state = jax.tree.map(_select, state_re, state_st)
        obs = _select(obs_re, obs_st)
        info = {**info, "terminated": terminated, "truncated": truncated, "final_observation": obs_st,
                "reset_index": index}
        return obs, state, reward, terminated, truncated, info

    # ------------------------------------------------------------------ spaces, rendering
    def observation_space(self, params: CraftaxParams) -> spaces.Box:
        space = self._env.observation_space(params.inner)
        return spaces.Box(0.0, 1.0, tuple(space.shape), jnp.float32)

    def action_space(self, params: CraftaxParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(self.num_actions)

    def render_frame(self, state, params: CraftaxParams) -> jax.Array:
        """The library's pixel renderer at 16 pixels a block: uint8 ``[H, W, 3]`` (any id); inside jit
        or not (:func:`frame_renderer`)."""
        if self._frame_renderer is None:
            self._frame_renderer = frame_renderer(self.classic)
        frame = self._frame_renderer(state)
        return jnp.clip(jnp.round(frame), 0, 255).astype(jnp.uint8)


@functools.cache
def frame_textures(classic: bool) -> dict:
    """The library's textures at 16 pixels a block, computed on the host (concrete arrays, also when
    called while a function is being traced).

    Craftax builds its textures on first render (``load_all_textures``: from the cache file
    ``TEXTURE_CACHE_FILE`` in its install directory, or, without one, from its PNGs with jax.numpy at 7,
    16 and 64 pixels a block, then writes that file). Under ``jax.jit`` that build is traced and fails
    (its resizing converts an array to numpy); it takes ~50 s (Classic) and ~210 s (full Craftax) on 2
    CPU cores, and an install directory may not be writable. Here only the 16-pixel set is built
    (Classic ~4 s, full ~15 s), eagerly (``jax.ensure_compile_time_eval``), and nothing is written."""
    if classic:
        from craftax.craftax_classic import constants
    else:
        from craftax.craftax import constants
    with jax.ensure_compile_time_eval():
        return constants.load_all_textures_given_size(_FRAME_BLOCK_PIXELS)


def frame_renderer(classic: bool):
    """The library's ``make_craftax_pixel_renderer(16)`` on :func:`frame_textures`: ``state -> float
    [H, W, 3]`` in [0, 255]."""
    if classic:
        from craftax.craftax_classic import renderer
    else:
        from craftax.craftax import renderer
    textures = frame_textures(classic)
    # the library's renderer reads its textures from load_all_textures() (all three sizes) when it is
    # made, and keeps them; it is handed the 16-pixel set for that one call
    library_loader = renderer.load_all_textures
    renderer.load_all_textures = lambda: {_FRAME_BLOCK_PIXELS: textures}
    try:
        return renderer.make_craftax_pixel_renderer(_FRAME_BLOCK_PIXELS)
    finally:
        renderer.load_all_textures = library_loader


def make(name: str, options: dict) -> tuple[Craftax, CraftaxParams]:
    """``(env, params)`` for a Craftax id; ``options`` = the run's ``env.params`` (see the module doc)."""
    if name not in _IDS:
        raise ConfigError(f"unknown Craftax env '{name}'; craftax ids: {list(_IDS)}")
    inner = make_craftax_env_from_name(name, auto_reset=False).default_params
    values = check(f"craftax/{name}", dict(options or {}), options_of(inner))
    if "max_steps_in_episode" in values:
        limit = values.pop("max_steps_in_episode")
        if "max_timesteps" in values and values["max_timesteps"] != limit:
            raise ConfigError("config keys 'env.params.max_steps_in_episode' and "
                              "'env.params.max_timesteps' name the same Craftax limit: give one")
        values["max_timesteps"] = limit
    reset_ratio = values.pop("reset_ratio", DEFAULT_RESET_RATIO)
    return Craftax(name, reset_ratio), CraftaxParams(inner.replace(**values))


def options_of(inner) -> dict[str, Option]:
    """The options of a Craftax env: the fields of the library's ``EnvParams`` ``inner`` typed by
    their defaults (ints >= 1, spawn chances >= 0; ``fractal_noise_angles``, a tuple of None, is not
    one), ``max_steps_in_episode`` (another name of ``max_timesteps``) and ``reset_ratio``."""
    out = {"reset_ratio": Option("int", minimum=1, why="envs per generated reset world"),
           "max_steps_in_episode": Option("int", minimum=1)}
    for field in dataclasses.fields(inner):
        default = getattr(inner, field.name)
        option = Option.like(default, minimum=0.0) if isinstance(default, float) else Option.like(default)
        if option is not None and option.kind != "array":
            out[field.name] = option
    return out
