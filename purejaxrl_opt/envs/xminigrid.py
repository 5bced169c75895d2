"""XLand-MiniGrid (``xminigrid``): its MiniGrid ports in the gymnax 1.x protocol.

``env.id = "xminigrid/<name>"``, ``<name>`` one of the ids of :func:`ids`, e.g.
``xminigrid/MiniGrid-Empty-6x6``, ``xminigrid/MiniGrid-DoorKey-8x8``, ``xminigrid/MiniGrid-MemoryS8``.

Which ids: xminigrid's registered ``MiniGrid-*`` envs (its ports of MiniGrid). Its
``XLand-MiniGrid-R*`` meta-RL envs are not offered: they are built with an empty ruleset (no goal,
no rules, no objects, never terminated) and are meant to take a ruleset from one of xminigrid's
benchmarks (``xminigrid.load_benchmark``), which downloads it from the Hugging Face hub on first use;
nothing here downloads at run time.

Why not a wrapper of xminigrid's: ``Environment.step`` (xminigrid 0.9.3) is the raw transition, no
auto-reset; its ``GymAutoResetWrapper`` resets in the same step but overwrites the last observation
(none is kept) and ``DmEnvAutoResetWrapper`` resets on the step *after* the end (that step's action is
ignored). Here ``step_env`` is ``Environment.step`` and gymnax's ``step`` resets in the same call,
keeping the pre-reset observation in ``info["final_observation"]``. xminigrid marks an episode's end
with ``step_type == LAST`` and tells the two ends apart by the discount: the goal reached (or, in
Memory, either end of the corridor) is ``discount 0``; ``step_num == max_steps`` without it is
``discount 1``. So ``terminated = LAST & discount == 0`` and ``is_truncated = LAST & discount == 1``:
a goal reached on the last allowed step is a termination. The reward is xminigrid's,
``1 - 0.9 * step_num / max_steps`` on success, else 0.

Observation: xminigrid's own, the agent-centred partial view ``uint8 [V, V, 2]`` of (tile id 0-12,
colour id 0-11), agent at the bottom centre facing up, ``V = view_size`` (xminigrid's default per env:
7, Memory 3, so ``[3, 3, 2]`` on MemoryS8). It is not an RGB image but, like navix's symbolic grids,
gets the project's conv torso (3x3 VALID convolutions, ``network.cnn_channels``; ``V = 3`` leaves one
1x1 output per channel); ``flatten: true`` gives ``[V * V * 2]`` for a plain MLP. ``one_hot: true``
gives each cell as float32 one-hot codes of its tile (13) and colour (12), ``[V, V, 25]`` (flattened:
``[V * V * 25]``): the ids are categories, and fed raw a network reads ball (3) and key (7) as numbers
4 apart, not as different things (xminigrid's own baselines embed the ids for the same reason). The
agent's direction is not in it (xminigrid's ``DirectionObservationWrapper`` would make a dict of it).

Randomness: ``reset(key)`` fully determines the episode; xminigrid's step draws nothing (the key in
its state is used only by its auto-reset wrappers), so the step key is unused and ``keyed_reset``
holds.

Options (``env.params``), checked before anything is compiled: ``max_steps_in_episode`` (xminigrid's
``max_steps``; default xminigrid's own per env, MiniGrid's formulas: Empty ``4 * H * W``, DoorKey
``10 * H * W``, Memory ``5 * width ** 2``), ``view_size`` (odd, >= 3, as MiniGrid requires; default
xminigrid's), ``flatten`` and ``one_hot`` (bools, default false). xminigrid's params are static (``pytree_node=False``),
so they are fixed when the env is made; ``height``/``width`` are not options: the id names the size and
the layouts have size limits xminigrid does not check.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import xminigrid
from flax import struct
from gymnax.environments import environment, spaces
from xminigrid.core.constants import NUM_COLORS, NUM_TILES
from xminigrid.types import StepType

from purejaxrl_opt.envs.options import Option, check
from purejaxrl_opt.envs.protocol import ResetWhereDone
from purejaxrl_opt.config.errors import ConfigError

LIBRARY = "xminigrid"

OPTIONS = {"max_steps_in_episode": Option("int", minimum=1),
           "view_size": Option("int", minimum=3, odd=True, why="MiniGrid's agent-centred view"),
           "flatten": Option("bool"), "one_hot": Option("bool")}
RENDER_TILE_SIZE = 16  # pixels per cell of render_frame


def ids() -> tuple[str, ...]:
    """xminigrid's registered ``MiniGrid-*`` ids, in its order (the ``XLand-MiniGrid-*`` ones need a
    downloaded ruleset benchmark: module docstring)."""
    return tuple(i for i in xminigrid.registered_environments() if i.startswith("MiniGrid-"))


@struct.dataclass
class EnvParams:
    max_steps_in_episode: int  # xminigrid's max_steps (fixed when the env is made)


@struct.dataclass
class EnvState:
    timestep: Any  # xminigrid.types.TimeStep: the library's state, step_num, step_type and discount


class XMiniGridEnv(ResetWhereDone, environment.Environment):
    """An xminigrid environment in the gymnax protocol (see the module docstring); batches step
    through :class:`ResetWhereDone` (a grid is generated only on steps where some episode ended)."""

    action_mask = False
    keyed_reset = True

    def __init__(self, name: str, xm_env, xm_params, flatten: bool, one_hot: bool = False):
        self.env_name = name
        self._env = xm_env
        self._params = xm_params  # static (xminigrid's params are not pytree nodes)
        self._flatten = flatten
        self._one_hot = one_hot
        self._num_actions = int(xm_env.num_actions(xm_params))
        sample = jax.eval_shape(xm_env.reset, xm_params, jax.random.PRNGKey(0)).observation
        cell = sample.shape[:-1] + ((NUM_TILES + NUM_COLORS,) if one_hot else sample.shape[-1:])
        self._obs_shape = (int(np.prod(cell)),) if flatten else tuple(cell)
        self._obs_dtype = jnp.float32 if one_hot else sample.dtype

    @property
    def name(self) -> str:
        return self.env_name

    @property
    def default_params(self) -> EnvParams:
        return EnvParams(max_steps_in_episode=int(self._params.max_steps))

    @property
    def num_actions(self) -> int:
        return self._num_actions

    def _obs(self, timestep):
        obs = timestep.observation
        if self._one_hot:
            obs = jnp.concatenate([jax.nn.one_hot(obs[..., 0], NUM_TILES, dtype=jnp.float32),
                                   jax.nn.one_hot(obs[..., 1], NUM_COLORS, dtype=jnp.float32)], axis=-1)
        return obs.reshape(self._obs_shape) if self._flatten else obs

    def reset_env(self, key, params):
        timestep = self._env.reset(self._params, key)
        return self._obs(timestep), EnvState(timestep)

    def step_env(self, key, state: EnvState, action, params):
        # the raw transition (xminigrid's Environment.step never resets)
        timestep = self._env.step(self._params, state.timestep, jnp.asarray(action, jnp.int32))
        terminated = (timestep.step_type == StepType.LAST) & (timestep.discount == 0)
        info = {"discount": jnp.asarray(timestep.discount, jnp.float32)}
        return (self._obs(timestep), EnvState(timestep), jnp.asarray(timestep.reward, jnp.float32),
                terminated, info)

    def is_truncated(self, state: EnvState, params) -> jax.Array:
        timestep = state.timestep
        return (timestep.step_type == StepType.LAST) & (timestep.discount != 0)

    def observation_space(self, params) -> spaces.Box:
        high = 1 if self._one_hot else max(NUM_TILES, NUM_COLORS) - 1
        return spaces.Box(0, high, self._obs_shape, self._obs_dtype)

    def action_space(self, params) -> spaces.Discrete:
        return spaces.Discrete(self._num_actions)

    def render_frame(self, state: EnvState, params) -> jax.Array:
        """The whole grid as RGB, ``uint8 [H * 16, W * 16, 3]``, the agent's view highlighted:
        xminigrid's numpy renderer (it does not trace) through ``jax.pure_callback``."""
        from xminigrid.rendering.rgb_render import render
        from xminigrid.types import AgentState

        grid, agent = state.timestep.state.grid, state.timestep.state.agent
        view_size = int(self._params.view_size)
        shape = jax.ShapeDtypeStruct((grid.shape[0] * RENDER_TILE_SIZE, grid.shape[1] * RENDER_TILE_SIZE, 3),
                                     jnp.uint8)

        def _render(grid, position, direction):
            agent = AgentState(position=np.asarray(position), direction=np.asarray(direction))
            return np.asarray(render(np.asarray(grid), agent, view_size, RENDER_TILE_SIZE), np.uint8)

        return jax.pure_callback(_render, shape, grid, agent.position, agent.direction)


def make(name: str, options: dict) -> tuple[XMiniGridEnv, EnvParams]:
    """``(env, env_params)`` for an xminigrid id; ``options`` = the run's ``env.params`` (module
    docstring)."""
    if name not in ids():
        raise ConfigError(f"config key 'env.id' = 'xminigrid/{name}' is invalid: must be one of "
                          f"{['xminigrid/' + i for i in ids()]}")
    values = check(f"xminigrid/{name}", dict(options or {}), OPTIONS)
    overrides = {}
    if "max_steps_in_episode" in values:
        overrides["max_steps"] = values["max_steps_in_episode"]
    if "view_size" in values:
        overrides["view_size"] = values["view_size"]
    switches = {key: values.get(key, False) for key in ("flatten", "one_hot")}
    xm_env, xm_params = xminigrid.make(name, **overrides)
    env = XMiniGridEnv(name, xm_env, xm_params, **switches)
    return env, env.default_params
