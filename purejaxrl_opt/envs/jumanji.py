"""Jumanji (InstaDeep's combinatorial and grid tasks, ``jumanji``): its environments in the gymnax 1.x
protocol.

``env.id = "jumanji/<name>"``, ``<name>`` one of :func:`ids` (jumanji's registered envs with one
discrete action), e.g. ``jumanji/Snake-v1``, ``jumanji/Game2048-v1``, ``jumanji/Maze-v0``.

Stepping: jumanji's ``reset(key) -> (state, timestep)`` and ``step(state, action)`` with a dm_env
``TimeStep``; never its ``AutoResetWrapper``. ``step_env`` is one raw ``step``; gymnax's ``step``
resets in the same call and keeps the pre-reset observation in ``info["final_observation"]``.

Time limits belong to this adapter, not to the library: Snake and Maze (jumanji 1.1.2) end an episode
at their ``time_limit`` with discount 0, i.e. as a *termination* the agent cannot tell from dying. So
the library env is built with its time limit out of reach, the adapter counts steps (``EnvState.time``)
and ``is_truncated`` is ``time >= max_steps_in_episode`` or a library truncation (``LAST`` with a
discount != 0, for envs whose limit cannot be moved); ``terminated`` is ``LAST`` with discount 0.
``max_steps_in_episode`` defaults to the library's own ``time_limit`` (Snake 4000, Maze
``rows * cols`` = 100, PacMan 1000, SlidingTilePuzzle 500) and to :data:`NO_LIMIT_DEFAULT` where the
library has none (Game2048, TSP, Knapsack, CVRP, GraphColoring end by themselves).

Observation: jumanji's is a structure (a NamedTuple, Maze's with nested ``Position`` tuples). It is
encoded as ONE float32 vector: every leaf except ``action_mask``, flattened (row-major) and cast to
float32, concatenated in the Observation's field order (depth first: ``jax.tree_util.tree_leaves``),
with the step counters (``step_count``) divided by ``max_steps_in_episode`` (a [0, 1] time feature,
not a raw count up to thousands), then the ``action_mask`` as 0/1 in the LAST ``num_actions``
entries (``action_mask = True``: the policy masks its logits with them). E.g. Snake-v1: grid
``12*12*5`` + step_count 1 + mask 4 = 725; Game2048-v1: board 16 + mask 4 = 20; Maze-v0: agent row,
col, target row, col, walls 100, step_count 1 + mask 4 = 109. ``action_mask: false`` drops the mask
(no masking; the library's own handling of illegal actions applies, e.g. Snake dies).

Options (``env.params``): ``max_steps_in_episode``, ``action_mask`` (bool, default true) and the
library constructor's int/float/bool arguments (Snake: ``num_rows``, ``num_cols``, at least two cells
in all; Game2048: ``board_size`` >= 2), typed by their annotations and checked before the env is built
(purejaxrl_opt/envs/options.py): sizes and limits are ints >= 1, or the least size that makes a game
(:data:`MINIMUM_SIZES`, :data:`MINIMUM_CELLS`).
"""

from __future__ import annotations

import inspect
from typing import Any

import jax
import jax.numpy as jnp
import jumanji
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces
from jumanji import specs
from jumanji.types import StepType

from purejaxrl_opt.envs.options import Option, check
from purejaxrl_opt.envs.protocol import ResetWhereDone
from purejaxrl_opt.config.errors import ConfigError

LIBRARY = "jumanji"

# jumanji 1.1.2's registered envs with one discrete action (specs.DiscreteArray) and a mask of that
# size (or none); Sokoban-v0 is left out: its constructor downloads the Boxoban levels
SUPPORTED = ("Snake-v1", "Game2048-v1", "Maze-v0", "PacMan-v1", "SlidingTilePuzzle-v0", "TSP-v1",
             "Knapsack-v1", "CVRP-v1", "GraphColoring-v1")
NO_LIMIT_DEFAULT = 10_000  # max_steps_in_episode where the library has no time limit
_FAR_AWAY = 2**30  # the library's own time limit, out of reach: the adapter's counter truncates
COUNTERS = ("step_count", "step")  # observation fields divided by max_steps_in_episode
_LIBRARY_FIXED = ("time_limit", "generator", "viewer", "reward_fn", "self")
# The least sizes that make a game (jumanji checks none; a negative size is a broadcast error deep
# inside its reset). Every size is >= 1 (purejaxrl_opt/envs/options.py); a 2048 board of one cell has
# no legal move from the start
MINIMUM_SIZES = {("Game2048-v1", "board_size"): (2, "a board with a legal first move")}
# ... and Snake places its fruit on a cell the head is not on: at least two cells
MINIMUM_CELLS = {"Snake-v1": (("num_rows", "num_cols"), 2)}


def ids() -> tuple[str, ...]:
    return SUPPORTED


@struct.dataclass
class EnvParams:
    max_steps_in_episode: int  # the adapter's time limit (truncation)


@struct.dataclass
class EnvState:
    library: Any  # jumanji's State
    time: jax.Array  # int32 steps since the reset
    truncated: jax.Array  # bool: the library ended the episode with a discount != 0


def _constructor_options(name: str, cls) -> dict[str, Option]:
    """The constructor's scalar arguments (what ``env.params`` may set besides the adapter's own),
    typed by their annotations (else their defaults), with the library's least sizes."""
    out = {}
    for arg, param in inspect.signature(cls.__init__).parameters.items():
        if arg in _LIBRARY_FIXED or param.default is inspect.Parameter.empty:
            continue
        minimum, why = MINIMUM_SIZES.get((name, arg), (None, ""))
        option = Option.like(param.default, _plain_type(param.annotation), minimum=minimum, why=why)
        if option is not None and option.kind in ("bool", "int", "float"):
            out[arg] = option
    return out


def _plain_type(annotation):
    """``bool``/``int``/``float`` from an annotation, also a string one (``from __future__ import
    annotations``); anything else None."""
    names = {"bool": bool, "int": int, "float": float}
    if isinstance(annotation, str):
        return names.get(annotation)
    return annotation if annotation in (bool, int, float) else None


class JumanjiEnv(ResetWhereDone, environment.Environment):
    """A jumanji environment in the gymnax protocol (see the module docstring)."""

    keyed_reset = True

    def __init__(self, name: str, lib_env, max_steps: int, use_mask: bool):
        self.env_name = name
        self._env = lib_env
        self._max_steps = max_steps
        self._num_actions = int(lib_env.action_spec.num_values)
        sample = lib_env.observation_spec.generate_value()
        fields = sample._asdict() if hasattr(sample, "_asdict") else {"observation": sample}
        self._has_mask = "action_mask" in fields
        self.action_mask = bool(use_mask and self._has_mask)
        # the paths of the leaves of the observation, in encoding order (mask excluded)
        self._fields = tuple(name for name in fields if name != "action_mask")
        self._obs_size = int(sum(np.size(leaf) for name in self._fields
                                 for leaf in jax.tree_util.tree_leaves(fields[name])))
        self._obs_size += self._num_actions if self.action_mask else 0

    @property
    def name(self) -> str:
        return self.env_name

    @property
    def default_params(self) -> EnvParams:
        return EnvParams(max_steps_in_episode=self._max_steps)

    @property
    def num_actions(self) -> int:
        return self._num_actions

    def encode(self, observation) -> jax.Array:
        """jumanji's observation structure -> ``float32 [obs_size]`` (module docstring)."""
        fields = observation._asdict() if hasattr(observation, "_asdict") else {"observation": observation}
        parts = []
        for name in self._fields:
            for leaf in jax.tree_util.tree_leaves(fields[name]):
                leaf = jnp.asarray(leaf, jnp.float32).reshape(-1)
                parts.append(leaf / self._max_steps if name in COUNTERS else leaf)
        if self.action_mask:
            parts.append(jnp.asarray(fields["action_mask"], jnp.float32).reshape(-1))
        return jnp.concatenate(parts)

    def reset_env(self, key, params):
        state, timestep = self._env.reset(key)
        return self.encode(timestep.observation), EnvState(state, jnp.zeros((), jnp.int32),
                                                           jnp.zeros((), bool))

    def step_env(self, key, state: EnvState, action, params):
        lib_state, timestep = self._env.step(state.library, jnp.asarray(action, jnp.int32))
        last = timestep.step_type == StepType.LAST
        discount = jnp.asarray(timestep.discount, jnp.float32)
        terminated = jnp.logical_and(last, discount == 0)
        state = EnvState(lib_state, state.time + 1, jnp.logical_and(last, discount != 0))
        return (self.encode(timestep.observation), state, jnp.asarray(timestep.reward, jnp.float32),
                terminated, {"discount": discount})

    def is_truncated(self, state: EnvState, params) -> jax.Array:
        return jnp.logical_or(state.time >= params.max_steps_in_episode, state.truncated)

    def observation_space(self, params) -> spaces.Box:
        return spaces.Box(-jnp.inf, jnp.inf, (self._obs_size,), jnp.float32)

    def action_space(self, params) -> spaces.Discrete:
        return spaces.Discrete(self._num_actions)


def make(name: str, options: dict) -> tuple[JumanjiEnv, EnvParams]:
    """``(env, env_params)`` for a jumanji id; ``options`` = the run's ``env.params`` (module docstring)."""
    registered = jumanji.registered_environments()
    if name not in SUPPORTED:
        why = ("its action space is not one Discrete (MultiDiscrete/continuous actions are not supported)"
               if name in registered and name != "Sokoban-v0" else
               "its constructor downloads the Boxoban levels" if name == "Sokoban-v0" else "unknown id")
        raise ConfigError(f"config key 'env.id' = 'jumanji/{name}' is invalid ({why}): must be one of "
                          f"{['jumanji/' + i for i in ids()]}")
    from jumanji.registration import _REGISTRY  # the entry point, to read the constructor's options

    entry = _REGISTRY[name].entry_point
    module_name, cls_name = entry.split(":")
    cls = getattr(__import__(module_name, fromlist=[cls_name]), cls_name)
    library_options = _constructor_options(name, cls)
    allowed = {"max_steps_in_episode": Option("int", minimum=1), "action_mask": Option("bool"),
               **library_options}
    values = check(f"jumanji/{name}", dict(options or {}), allowed)
    kwargs = {key: value for key, value in values.items() if key in library_options}
    if name in MINIMUM_CELLS:
        keys, least = MINIMUM_CELLS[name]
        sizes = [kwargs.get(key, inspect.signature(cls.__init__).parameters[key].default) for key in keys]
        if int(np.prod(sizes)) < least:
            raise ConfigError(f"config keys {[f'env.params.{key}' for key in keys]} = {sizes} are invalid for "
                              f"jumanji/{name}: the board needs at least {least} cells (a head and a fruit)")
    use_mask = values.get("action_mask", True)
    has_limit = "time_limit" in inspect.signature(cls.__init__).parameters
    if has_limit:
        own_limit = jumanji.make(name, **kwargs).time_limit
        kwargs["time_limit"] = _FAR_AWAY
    else:
        own_limit = NO_LIMIT_DEFAULT
    max_steps = values.get("max_steps_in_episode", own_limit)
    lib_env = jumanji.make(name, **kwargs)
    if not isinstance(lib_env.action_spec, specs.DiscreteArray):
        raise ConfigError(f"config key 'env.id' = 'jumanji/{name}' is invalid: its action spec "
                          f"{type(lib_env.action_spec).__name__} is not one Discrete")
    env = JumanjiEnv(name, lib_env, int(max_steps), use_mask)
    mask = getattr(lib_env.observation_spec.generate_value(), "action_mask", None)
    if mask is not None and tuple(np.shape(mask)) != (env.num_actions,):
        raise ConfigError(f"config key 'env.id' = 'jumanji/{name}' is invalid: its action mask has shape "
                          f"{tuple(np.shape(mask))}, not ({env.num_actions},)")
    return env, env.default_params
