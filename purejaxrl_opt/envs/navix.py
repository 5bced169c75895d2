"""Navix (MiniGrid in JAX, ``navix``): its environments in the gymnax 1.x protocol.

``env.id = "navix/<name>"``, ``<name>`` one of navix's registered ids (:func:`ids`), e.g.
``navix/Navix-Empty-8x8-v0``, ``navix/Navix-DoorKey-5x5-v0``.

Why not navix's own ``step``: it auto-resets on the step *after* an episode ends (that step's action
is ignored and its transition is the reset) and reports the end as ``step_type`` 1 (truncation, the
``max_steps`` limit) or 2 (termination). Here ``step_env`` is navix's raw transition
(``Environment._step``), never its auto-reset, and gymnax's ``step`` resets in the same call and keeps
the pre-reset observation in ``info["final_observation"]``: ``terminated = step_type == 2``,
``is_truncated = step_type == 1`` (navix's ``check_truncation`` gives termination priority, so a goal
reached on the last allowed step is a termination).

Observation: navix's choice for its registered envs, ``symbolic``: the whole grid, ``uint8 [H, W, 3]``
of MiniGrid triples (object tag 0-10, colour, state/direction), e.g. ``[8, 8, 3]`` on Empty-8x8 and
``[5, 5, 3]`` on DoorKey-5x5. An ``[H, W, C]`` observation gets the project's conv torso (3x3 VALID
convolutions, ``network.cnn_channels``) before the MLP; ``flatten: true`` gives ``[H * W * 3]`` for a
plain MLP. ``observation: symbolic_first_person`` is the agent-centred 7x7 view (``[7, 7, 3]``, the
partially observable MiniGrid setting); ``categorical``/``categorical_first_person`` are one
entity id per cell (``int32 [H, W]`` / ``[7, 7]``, flattened by the torso).

Randomness: ``reset(key)`` fully determines the episode (navix keeps its own key in the state for
stochastic envs, drawn from the reset key), so the step key is unused and ``keyed_reset`` holds.

Options (``env.params``): ``max_steps_in_episode`` (navix's ``max_steps``, default 100, navix's own
default), ``observation`` (above), ``flatten`` (bool, default false).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import navix
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces
from navix import observations as nx_obs
from navix.entities import EntityIds

from purejaxrl_opt.envs.options import Option, check
from purejaxrl_opt.config.errors import ConfigError

LIBRARY = "navix"

OBSERVATIONS = {"symbolic": nx_obs.symbolic, "symbolic_first_person": nx_obs.symbolic_first_person,
                "categorical": nx_obs.categorical, "categorical_first_person": nx_obs.categorical_first_person}
DEFAULT_MAX_STEPS = 100  # navix.make's default
OPTIONS = {"max_steps_in_episode": Option("int", minimum=1), "observation": Option("str", choices=tuple(OBSERVATIONS)),
           "flatten": Option("bool")}


def ids() -> tuple[str, ...]:
    """Every navix registered env id (navix's registry, in its order)."""
    return tuple(navix.registry())


@struct.dataclass
class EnvParams:
    max_steps_in_episode: int = DEFAULT_MAX_STEPS  # navix's max_steps (fixed when the env is made)


@struct.dataclass
class EnvState:
    timestep: Any  # navix.Timestep: the library's state, its step counter t and step_type


class NavixEnv(environment.Environment):
    """A navix environment in the gymnax protocol (see the module docstring)."""

    action_mask = False
    keyed_reset = True

    def __init__(self, name: str, nx_env, flatten: bool):
        self.env_name = name
        self._env = nx_env
        self._flatten = flatten
        self._num_actions = int(len(nx_env.action_set))
        sample = jax.eval_shape(nx_env.reset, jax.random.PRNGKey(0)).observation
        self._obs_shape = (int(np.prod(sample.shape)),) if flatten else tuple(sample.shape)
        self._obs_dtype = sample.dtype

    @property
    def name(self) -> str:
        return self.env_name

    @property
    def default_params(self) -> EnvParams:
        return EnvParams(max_steps_in_episode=int(self._env.max_steps))

    @property
    def num_actions(self) -> int:
        return self._num_actions

    def _obs(self, timestep):
        obs = timestep.observation
        return obs.reshape(self._obs_shape) if self._flatten else obs

    def reset_env(self, key, params):
        timestep = self._env.reset(key)
        return self._obs(timestep), EnvState(timestep)

    def step_env(self, key, state: EnvState, action, params):
        # the raw transition (no auto-reset): navix's step would reset here if the previous step ended
        timestep = self._env._step(state.timestep, jnp.asarray(action, jnp.int32))
        terminated = timestep.step_type == navix.StepType.TERMINATION
        info = {"discount": jnp.where(terminated, 0.0, 1.0).astype(jnp.float32)}
        return (self._obs(timestep), EnvState(timestep), jnp.asarray(timestep.reward, jnp.float32),
                terminated, info)

    def is_truncated(self, state: EnvState, params) -> jax.Array:
        return state.timestep.step_type == navix.StepType.TRUNCATION

    def observation_space(self, params) -> spaces.Box:
        high = 255 if self._obs_dtype == jnp.uint8 else int(max(int(v) for k, v in vars(EntityIds).items()
                                                                  if not k.startswith("_")))
        return spaces.Box(0, high, self._obs_shape, self._obs_dtype)

    def action_space(self, params) -> spaces.Discrete:
        return spaces.Discrete(self._num_actions)

    def render_frame(self, state: EnvState, params) -> jax.Array:
        """The whole grid as RGB, ``uint8 [H * 8, W * 8, 3]`` (navix's sprite renderer)."""
        return nx_obs.rgb(state.timestep.state)


def make(name: str, options: dict) -> tuple[NavixEnv, EnvParams]:
    """``(env, env_params)`` for a navix id; ``options`` = the run's ``env.params`` (module docstring)."""
    if name not in navix.registry():
        raise ConfigError(f"config key 'env.id' = 'navix/{name}' is invalid: must be one of "
                          f"{['navix/' + i for i in ids()]}")
    values = check(f"navix/{name}", dict(options or {}), OPTIONS)
    max_steps = values.get("max_steps_in_episode", DEFAULT_MAX_STEPS)
    observation = values.get("observation", "symbolic")
    flatten = values.get("flatten", False)
    nx_env = navix.make(name, max_steps=max_steps, observation_fn=OBSERVATIONS[observation])
    env = NavixEnv(name, nx_env, flatten)
    return env, env.default_params
