"""MuJoCo Playground (``playground/<name>``) and Brax (``brax/<name>``) environments.

One adapter for both libraries: their environments share Brax's ``State`` (``obs, reward, done,
metrics, info`` plus the physics state) and a key-free ``step(state, action)``. The *raw* environment
is used, never the libraries' training wrappers: Playground's ``wrap_for_brax_training`` and Brax's
``AutoResetWrapper`` replace the last observation of an episode with the next episode's first one, so a
time-limit truncation could not be bootstrapped from the state it really reached. Here the adapter
keeps its own step counter (``PlaygroundState.time``) and the gymnax base class does the auto-reset,
with the pre-reset observation in ``info["final_observation"]``:

- ``terminated`` = the library's own ``done`` (e.g. Brax's ant falling, inverted_pendulum's pole past
  0.2 rad, a NaN in Playground's physics); it never includes the time limit;
- ``truncated`` = ``time >= max_steps_in_episode`` with ``max_steps_in_episode =
  ceil(episode_length / action_repeat)``; ``episode_length`` counts the library's control steps, as
  Brax's ``EpisodeWrapper`` does.

Actions are ``Box[-1, 1]^action_size`` (both libraries scale ``[-1, 1]`` to the actuator ranges
themselves). Observations are one float32 array: a Playground dict observation (locomotion:
``state`` / ``privileged_state``) gives the field named by ``env.params.obs_key`` (default
``"state"``). With ``env.params.critic_obs_key`` (an asymmetric actor-critic, as Brax's PPO builds it
from Playground's ``policy_obs_key`` / ``value_obs_key``) the observation is ``[P + C]``: the policy's
field flattened (``P`` entries) followed by the critic's (``C``); the env's ``policy_obs_size = P``
goes into the spec (``EnvSpec.policy_obs_size``), and the networks give the policy the first ``P``
entries and the critic the rest. One array keeps the protocol, the rollout buffers and the running
observation statistics (per entry, so each field is normalised on its own, as Brax normalises each
key of a dict observation) as they are.

Options (``env.params``; an unknown key or a bad value is a ConfigError naming the key and what is
allowed, purejaxrl_opt/envs/options.py):

==================  =========================================================================
``episode_length``  control steps per episode (default: Playground's config value, 1000 for the
                    dm_control suite; Brax: 1000)
``action_repeat``   library steps per agent step, rewards summed (default 1; Playground's own
                    config value where it sets one); stepping stops at a termination
``obs_key``         the field of a dict observation the policy reads (default ``"state"``)
``critic_obs_key``  the field the critic reads (default null: the policy's); e.g.
                    ``privileged_state`` (Playground's ``value_obs_key`` for its locomotion tasks)
``impl``            Playground only: MJX implementation, ``"jax"`` (default, any device) or
                    ``"warp"`` (the library's own default, CUDA only)
``backend``         Brax only: physics pipeline, ``generalized`` (default) | ``positional`` |
                    ``spring`` | ``mjx``
``config``          library options: Playground: its config keys (flattened with dots, e.g.
                    ``{ctrl_dt: 0.02}``); Brax: the env class's constructor arguments (e.g.
                    ``{ctrl_cost_weight: 0.1}``) and ``n_frames``
==================  =========================================================================

Playground's locomotion and manipulation envs load their robots from ``mujoco_menagerie``, which the
library ``git clone``s from GitHub into its install directory the first time such an env is built.
Nothing here downloads at run time and nothing is written into the library's install: a checkout of
mujoco_menagerie named by the environment variable ``MENAGERIE_ROOT`` (the variable the
``mujoco-menagerie`` package reads for "a checkout to use instead") is handed to Playground by setting
its module attribute ``mjx_env.MENAGERIE_PATH`` in this process, else Playground's own
``external_deps/mujoco_menagerie`` is used when it exists. Without either, those ids are refused when
built, naming both ways. The dm_control suite's assets ship inside the wheel.
"""

from __future__ import annotations

import inspect
import math
import os
from typing import Any


from purejaxrl_opt.envs.opengl import GL_OFF, set_headless_gl

set_headless_gl()  # before brax and mujoco are imported below

import brax.envs as brax_envs  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from flax import struct  # noqa: E402
from gymnax.environments import spaces  # noqa: E402
from gymnax.environments.environment import Environment  # noqa: E402
from mujoco_playground._src import dm_control_suite, locomotion, manipulation, mjx_env  # noqa: E402

from purejaxrl_opt.envs.options import Option, check  # noqa: E402
from purejaxrl_opt.envs.protocol import ResetWhereDone  # noqa: E402
from purejaxrl_opt.config.errors import ConfigError  # noqa: E402
from purejaxrl_opt.config.flat import flatten  # noqa: E402

LIBRARY = "playground"
# the env id prefixes this module serves: ``playground/<name>`` and ``brax/<name>``
PREFIXES: tuple[str, ...] = ("playground", "brax")

_IMPLS = ("jax", "warp")
_BRAX_BACKENDS = ("generalized", "positional", "spring", "mjx")
_COMMON_OPTIONS = {"episode_length": Option("int", minimum=1), "action_repeat": Option("int", minimum=1),
                   "obs_key": Option("str"), "critic_obs_key": Option("str"), "config": Option("mapping")}
_OPTIONS = {"playground": {**_COMMON_OPTIONS, "impl": Option("str", choices=_IMPLS)},
            "brax": {**_COMMON_OPTIONS, "backend": Option("str", choices=_BRAX_BACKENDS)}}
# set by this adapter's own options, so not accepted inside env.params.config
_PLAYGROUND_RESERVED = ("episode_length", "action_repeat", "impl")
_BRAX_EPISODE_LENGTH = 1000  # brax.envs.create's default


MENAGERIE_ROOT = "MENAGERIE_ROOT"  # environment variable: a mujoco_menagerie checkout
_LIBRARY_MENAGERIE = mjx_env.MENAGERIE_PATH  # Playground's own location (external_deps/)


def menagerie_path(environ=os.environ):
    """The mujoco_menagerie directory Playground is to read: ``$MENAGERIE_ROOT`` when set, else
    Playground's own ``external_deps/mujoco_menagerie`` (an ``etils.epath.Path``; it may not exist)."""
    from etils import epath

    root = environ.get(MENAGERIE_ROOT)
    return epath.Path(root) if root else _LIBRARY_MENAGERIE


def _menagerie_available(environ=os.environ) -> bool:
    return menagerie_path(environ).exists()


def _use_menagerie(environ=os.environ) -> None:
    """Point Playground at :func:`menagerie_path` (its envs read ``mjx_env.MENAGERIE_PATH`` when built;
    ``ensure_menagerie_exists`` then finds it and clones nothing)."""
    mjx_env.MENAGERIE_PATH = menagerie_path(environ)


def _needs_menagerie(name: str) -> bool:
    return name in locomotion.ALL_ENVS or name in manipulation.ALL_ENVS


def ids(prefix: str = LIBRARY) -> tuple[str, ...]:
    """Every name this adapter serves under ``prefix`` (without the prefix). Playground's locomotion
    and manipulation ids are listed whether or not the menagerie is on disk: building one without it
    is refused (:func:`make`) with what to do."""
    _check_prefix(prefix)
    if prefix == "brax":
        return tuple(sorted(brax_envs._envs))
    return tuple(dm_control_suite.ALL_ENVS) + tuple(locomotion.ALL_ENVS) + tuple(manipulation.ALL_ENVS)


def _check_prefix(prefix: str) -> None:
    if prefix not in PREFIXES:
        raise ConfigError(f"env id prefix '{prefix}' is not served by this adapter; it serves {list(PREFIXES)}")


# --------------------------------------------------------------------------- env
@struct.dataclass
class PlaygroundParams:
    max_steps_in_episode: int = 1000


@struct.dataclass
class PlaygroundState:
    """The library's own ``State`` and this adapter's step counter (agent steps in this episode)."""

    env_state: Any
    time: jnp.ndarray


def _obs_array(obs, obs_key: str | None, critic_obs_key: str | None = None):
    """The observation the agent sees: the dict field ``obs_key``, or with ``critic_obs_key`` the two
    fields flattened and concatenated ``[P + C]`` (policy's first)."""
    if critic_obs_key is not None:
        return jnp.concatenate([jnp.asarray(obs[obs_key], jnp.float32).reshape(-1),
                                jnp.asarray(obs[critic_obs_key], jnp.float32).reshape(-1)])
    if isinstance(obs, dict):
        obs = obs[obs_key]
    return jnp.asarray(obs, jnp.float32)


class PlaygroundEnv(ResetWhereDone, Environment):
    """A Playground or Brax env in the gymnax 1.x protocol (see the module docstring).

    ``reset``/``step`` (auto-reset, ``info["final_observation"]``) are gymnax's ``Environment``'s;
    ``step_batch`` (:class:`ResetWhereDone`) computes the batch's resets, a physics ``forward`` each,
    only on steps where some env's episode ended.
    """

    keyed_reset = True  # reset(key) determines the start state; step takes no randomness
    render_in_jit = False  # render_frame: MuJoCo's OpenGL renderer, on the host

    def __init__(self, env_id: str, raw_env, action_repeat: int, obs_key: str | None, obs_shape,
                 critic_obs_key: str | None = None, policy_obs_size: int | None = None):
        self.env_id = env_id
        self.raw_env = raw_env
        self.action_repeat = action_repeat
        self.obs_key = obs_key
        self.critic_obs_key = critic_obs_key
        # asymmetric actor-critic: the policy reads the first policy_obs_size entries (EnvSpec)
        self.policy_obs_size = policy_obs_size
        self._obs_shape = tuple(obs_shape)
        self._action_size = int(raw_env.action_size)
        self._renderer = None

    @property
    def name(self) -> str:
        return self.env_id

    @property
    def num_actions(self) -> int:
        return self._action_size

    @property
    def default_params(self) -> PlaygroundParams:
        return PlaygroundParams()

    def reset_env(self, key, params):
        env_state = self.raw_env.reset(key)
        obs = _obs_array(env_state.obs, self.obs_key, self.critic_obs_key)
        return obs, PlaygroundState(env_state, jnp.zeros((), jnp.int32))

    def step_env(self, key, state, action, params):
        del key  # the libraries' step is deterministic
        action = jnp.asarray(action, jnp.float32)
        if self.action_repeat == 1:
            env_state = self.raw_env.step(state.env_state, action)
            reward = jnp.asarray(env_state.reward, jnp.float32)
        else:
            env_state, reward = self._repeat(state.env_state, action)
        terminated = jnp.asarray(env_state.done) > 0.5
        obs = _obs_array(env_state.obs, self.obs_key, self.critic_obs_key)
        return obs, PlaygroundState(env_state, state.time + 1), reward, terminated, {}

    def _repeat(self, env_state, action):
        """``action_repeat`` library steps, rewards summed; a terminated env is not stepped further."""

        def _one(carry, _):
            env_state, total = carry
            stepped = self.raw_env.step(env_state, action)
            alive = jnp.asarray(env_state.done) <= 0.5
            env_state = jax.tree.map(lambda new, old: jnp.where(alive, new, old), stepped, env_state)
            return (env_state, total + jnp.where(alive, jnp.asarray(stepped.reward, jnp.float32), 0.0)), None

        (env_state, total), _ = jax.lax.scan(_one, (env_state, jnp.zeros((), jnp.float32)), None,
                                             length=self.action_repeat)
        return env_state, total

    def is_truncated(self, state, params):
        return state.time >= params.max_steps_in_episode

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, self._obs_shape, jnp.float32)

    def action_space(self, params):
        return spaces.Box(-1.0, 1.0, (self._action_size,), jnp.float32)

    # ----------------------------------------------------------------------- rendering
    def render_problem(self) -> str | None:
        """Why :meth:`render_frame` cannot work here (OpenGL disabled), or None."""
        gl = os.environ.get("MUJOCO_GL", "").lower().strip()
        if gl in GL_OFF:
            return (f"rendering a MuJoCo env needs OpenGL, but MUJOCO_GL={gl!r} (set where no libEGL is "
                    "found, see headless_gl): install libEGL (Debian/Ubuntu: libegl1) or set "
                    "MUJOCO_GL=osmesa (with OSMesa) before starting")
        return None

    def render_frame(self, state, params, height: int = 240, width: int = 320) -> np.ndarray:
        """uint8 ``[H, W, 3]`` of one (unbatched) state, by MuJoCo's offscreen renderer (EGL when
        headless). Runs on the host, outside jit (``render_in_jit = False``)."""
        problem = self.render_problem()
        if problem:
            raise ValueError(problem)
        model = self._mj_model()
        if self._renderer is None:
            self._renderer = mujoco.Renderer(model, height=height, width=width)
        data = mujoco.MjData(model)
        physics = state.env_state.pipeline_state if hasattr(state.env_state, "pipeline_state") \
            else state.env_state.data
        qpos = getattr(physics, "qpos", None)
        qpos = getattr(physics, "q") if qpos is None else qpos
        qvel = getattr(physics, "qvel", None)
        qvel = getattr(physics, "qd") if qvel is None else qvel
        data.qpos[:] = np.asarray(qpos)
        data.qvel[:] = np.asarray(qvel)
        mujoco.mj_forward(model, data)
        self._renderer.update_scene(data)
        return np.asarray(self._renderer.render(), np.uint8)

    def _mj_model(self):
        if hasattr(self.raw_env, "sys"):  # brax: the System keeps the MjModel it was built from
            return self.raw_env.sys.mj_model
        return self.raw_env.mj_model


# --------------------------------------------------------------------------- construction
def _make_playground(name: str, options: dict):
    if name not in ids("playground"):
        raise ConfigError(f"unknown env 'playground/{name}'; available: {list(ids('playground'))}")
    if _needs_menagerie(name):
        if not _menagerie_available():
            root = os.environ.get(MENAGERIE_ROOT)
            where = (f"${MENAGERIE_ROOT} = {root!r} does not exist" if root else
                     f"neither ${MENAGERIE_ROOT} is set nor {_LIBRARY_MENAGERIE} exists")
            raise ConfigError(
                f"env 'playground/{name}' needs the mujoco_menagerie robot assets ({where}). MuJoCo "
                "Playground would git clone them from GitHub when the env is built; this project does not "
                f"download at run time. Clone github.com/google-deepmind/mujoco_menagerie (Playground pins "
                f"commit {mjx_env.MENAGERIE_COMMIT_SHA}) and set {MENAGERIE_ROOT} to it; ids without it: "
                f"{list(dm_control_suite.ALL_ENVS)}")
        _use_menagerie()
    impl = options.get("impl", "jax")
    default = flatten(_playground_default_config(name))
    overrides = dict(options.get("config") or {})
    for key in overrides:
        if key in _PLAYGROUND_RESERVED:
            raise ConfigError(f"config key 'env.params.config.{key}': set it as 'env.params.{key}'")
        if key not in default:
            allowed = sorted(k for k in default if k not in _PLAYGROUND_RESERVED)
            raise ConfigError(f"unknown config key 'env.params.config.{key}' for playground/{name}; "
                              f"allowed: {allowed}")
    if "impl" in default:
        overrides["impl"] = impl
    elif "impl" in options:  # a task whose config has no MJX implementation to choose
        raise ConfigError(f"config key 'env.params.impl' is invalid for playground/{name}: its config has no "
                          "'impl' (it is not an MJX env); leave env.params.impl out")
    episode_length = options.get("episode_length", int(default.get("episode_length", 1000)))
    action_repeat = options.get("action_repeat", int(default.get("action_repeat", 1)))
    try:
        raw = _load_playground(name, overrides)
    except (TypeError, ValueError, KeyError) as err:  # ml_collections rejects a value of the wrong type
        raise ConfigError(f"config key 'env.params.config' = {dict(options.get('config') or {})!r} is invalid "
                          f"for playground/{name}: {err}") from err
    return raw, episode_length, action_repeat


def _playground_default_config(name: str):
    if name in dm_control_suite.ALL_ENVS:
        return dm_control_suite.get_default_config(name)
    if name in locomotion.ALL_ENVS:
        return locomotion.get_default_config(name)
    return manipulation.get_default_config(name)


def _load_playground(name: str, overrides: dict):
    if name in dm_control_suite.ALL_ENVS:
        return dm_control_suite.load(name, config_overrides=overrides)
    if name in locomotion.ALL_ENVS:
        return locomotion.load(name, config_overrides=overrides)
    return manipulation.load(name, config_overrides=overrides)


def _make_brax(name: str, options: dict):
    if name not in brax_envs._envs:
        raise ConfigError(f"unknown env 'brax/{name}'; available: {list(ids('brax'))}")
    cls = brax_envs._envs[name]
    backend = options.get("backend", "generalized")
    allowed = sorted({p for p in inspect.signature(cls.__init__).parameters
                      if p not in ("self", "backend", "kwargs")} | {"n_frames"})
    kwargs = dict(options.get("config") or {})
    for key in kwargs:
        if key not in allowed:
            raise ConfigError(f"unknown config key 'env.params.config.{key}' for brax/{name}; allowed: {allowed}")
    episode_length = options.get("episode_length", _BRAX_EPISODE_LENGTH)
    action_repeat = options.get("action_repeat", 1)
    try:
        raw = cls(backend=backend, **kwargs)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"config key 'env.params.config' = {kwargs!r} is invalid for brax/{name}: {err}") from err
    return raw, episode_length, action_repeat


def make(name: str, options: dict | None = None, prefix: str = LIBRARY):
    """``(env, env_params)`` for ``<prefix>/<name>``; ``options`` = the run's ``env.params``."""
    _check_prefix(prefix)
    # config: null = none; critic_obs_key: null = the policy's field
    options = {key: value for key, value in dict(options or {}).items()
               if not (key in ("config", "critic_obs_key") and value is None)}
    options = check(f"{prefix}/{name}", options, _OPTIONS[prefix])
    obs_key = options.get("obs_key", "state")
    critic_obs_key = options.get("critic_obs_key")
    if prefix == "playground":
        raw, episode_length, action_repeat = _make_playground(name, options)
    else:
        raw, episode_length, action_repeat = _make_brax(name, options)
    obs = jax.eval_shape(raw.reset, jax.random.PRNGKey(0)).obs
    policy_obs_size = None
    if isinstance(obs, dict):
        for key, field in (("obs_key", obs_key), ("critic_obs_key", critic_obs_key)):
            if field is not None and field not in obs:
                raise ConfigError(f"config key 'env.params.{key}' = {field!r} is invalid for {prefix}/{name}: "
                                  f"must be one of its observation fields {sorted(obs)}")
        if critic_obs_key == obs_key:
            raise ConfigError(f"config key 'env.params.critic_obs_key' = {critic_obs_key!r} is invalid for "
                              f"{prefix}/{name}: must differ from env.params.obs_key (null: the critic reads "
                              "the policy's field)")
        if critic_obs_key is not None:
            policy_obs_size = math.prod(obs[obs_key].shape)
            obs = jax.ShapeDtypeStruct((policy_obs_size + math.prod(obs[critic_obs_key].shape),), jnp.float32)
        else:
            obs = obs[obs_key]
    else:
        for key in ("obs_key", "critic_obs_key"):
            if options.get(key) is not None:
                raise ConfigError(f"config key 'env.params.{key}' is invalid for {prefix}/{name}: its "
                                  "observation is one array, not a dict")
    env = PlaygroundEnv(f"{prefix}/{name}", raw, action_repeat, obs_key, obs.shape, critic_obs_key,
                        policy_obs_size)
    return env, PlaygroundParams(max_steps_in_episode=math.ceil(episode_length / action_repeat))
