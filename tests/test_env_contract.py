"""The env contract (purejaxrl_opt/envs/protocol.py), one suite for every adapter, and the registry.

Every case of :data:`CASES` is built through ``envs.make`` and stepped through the layer's
``reset_batch``/``step_batch`` by one ``jit(vmap(scan(...)))`` random-action rollout per case (compiled
once, shared by the tests of that case): shapes and dtypes against the spec, determinism under the same
key, auto-reset that keeps the pre-reset observation, truncation only at the time limit, and, on envs
whose spec has an action mask, that the policy never samples an illegal action. Hand-driven CartPole
episodes check truncation against termination exactly; the registry's errors are checked against a
genuinely missing library. Adding a library's env is one line in CASES.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces

from purejaxrl_opt import envs
from purejaxrl_opt.envs import registry
from purejaxrl_opt.config.errors import ConfigError
from tests.conftest import compose

ROOT = Path(__file__).resolve().parents[1]
LANES = 2


@dataclass(frozen=True)
class Case:
    """One env of the suite: its id, its ``env.params``, and what the suite expects of it."""

    env_id: str
    params: tuple[tuple[str, object], ...] = ()  # env.params as (key, value) pairs
    action_mask: bool = False  # the spec must say the same; the masked-sampling test runs on these
    steps: int = 64  # random-action steps; at least one of num_envs episodes must end within them
    num_envs: int = 4

    def __str__(self) -> str:
        return self.env_id + "".join(f",{k}={v}" for k, v in self.params)


# One line per env: cheap ids whose random-action episodes end within `steps` (lower the time limit
# with params where they would not)
CASES: tuple[Case, ...] = (
    Case("CartPole-v1"),  # gymnax: discrete actions, vector observations, terminations
    Case("gymnax/Pendulum-v1", (("max_steps_in_episode", 16),)),  # continuous; only truncations
    Case("Breakout-MinAtar", (("max_steps_in_episode", 24),)),  # image observations [10, 10, 4]
    Case("Addition-v0", steps=12),  # token env: int32 token buffer; ends at <eos> or 4 answer tokens
    Case("navix/Navix-Empty-5x5-v0", (("max_steps_in_episode", 12),), steps=40),  # uint8 grid [5, 5, 3]
    Case("xminigrid/MiniGrid-Empty-5x5", (("max_steps_in_episode", 12),), steps=40),  # uint8 view [7, 7, 2]
    Case("jumanji/Snake-v1", (("max_steps_in_episode", 16),), action_mask=True, steps=40),  # structure, mask
    Case("jumanji/Game2048-v1", (("max_steps_in_episode", 16),), action_mask=True, steps=40),
    Case("craftax/Craftax-Classic-Symbolic-v1", (("max_steps_in_episode", 12),), steps=30),  # optimistic reset
    Case("playground/CartpoleBalance", (("episode_length", 12),), steps=30),  # MJX; only truncations
    Case("brax/inverted_pendulum", (("episode_length", 40),), steps=40),  # brax: falls terminate
)
# compile-heavy cases run in the slow tier; the fast tier keeps one case per adapter module but
# Craftax's, whose death, time limit, final observation and pre-sampled reset are checked in the fast
# tier by tests/test_env_craftax.py, and Playground's (20 s of MJX compile), whose spaces, truncation,
# final observation and dict observations are checked in the fast tier by tests/test_env_playground.py
# (brax goes through the playground adapter; its termination is checked there too)
SLOW_CASES = {"brax/inverted_pendulum", "craftax/Craftax-Classic-Symbolic-v1", "playground/CartpoleBalance",
              "xminigrid/MiniGrid-Empty-5x5"}  # (XLand-MiniGrid: test_env_xminigrid.py's fast tests)
MASKED: tuple[Case, ...] = tuple(case for case in CASES if case.action_mask)


def random_actions(key: jax.Array, spec: envs.EnvSpec, space, obs: jnp.ndarray) -> jnp.ndarray:
    """One action per env (``obs [N, ...]``): uniform over the action space, over the legal actions
    where the spec has an action mask."""
    num_envs = obs.shape[0]
    if spec.action_mask:
        legal = obs.reshape(num_envs, -1)[:, -spec.num_actions:] > 0
        return jax.random.categorical(key, jnp.where(legal, 0.0, -jnp.inf))
    return jax.vmap(space.sample)(jax.random.split(key, num_envs))


def make_rollout(env, env_params, spec: envs.EnvSpec, num_envs: int, steps: int):
    """``jit(vmap(rollout))``: per lane key, reset ``num_envs`` envs and take ``steps`` random steps
    through ``envs.step_batch`` in a ``lax.scan``. Returns ``(first obs [L, N, ...], trajectory)``,
    the trajectory's leaves ``[L, T, N, ...]``; ``length`` is each episode's length after the step."""
    space = env.action_space(env_params)

    def rollout(key):
        reset_key, loop_key = jax.random.split(key)
        obs, state = envs.reset_batch(env, env_params, jax.random.split(reset_key, num_envs))

        def _step(carry, step_key):
            obs, state, length = carry
            action_key, env_key = jax.random.split(step_key)
            action = random_actions(action_key, spec, space, obs)
            next_obs, state, reward, terminated, truncated, info = envs.step_batch(
                env, env_params, jax.random.split(env_key, num_envs), state, action)
            length = length + 1
            out = {"obs": obs, "action": action, "next_obs": next_obs, "reward": reward,
                   "terminated": terminated, "truncated": truncated,
                   "final_obs": info["final_observation"], "length": length}
            return (next_obs, state, jnp.where(terminated | truncated, 0, length)), out

        init = (obs, state, jnp.zeros((num_envs,), jnp.int32))
        _, trajectory = jax.lax.scan(_step, init, jax.random.split(loop_key, steps))
        return obs, trajectory

    return jax.jit(jax.vmap(rollout))


@pytest.fixture(scope="module", ids=str, params=[
    pytest.param(case, marks=pytest.mark.slow) if case.env_id in SLOW_CASES else case for case in CASES])
def case_run(request):
    case = request.param
    env, env_params, spec = envs.make(case.env_id, dict(case.params))
    rollout = make_rollout(env, env_params, spec, case.num_envs, case.steps)
    keys = jax.random.split(jax.random.PRNGKey(0), LANES)
    first_obs, trajectory = jax.device_get(rollout(keys))
    return SimpleNamespace(case=case, env=env, env_params=env_params, spec=spec, rollout=rollout,
                           keys=keys, first_obs=first_obs, trajectory=trajectory)


def test_spec_describes_the_env(case_run):
    case, env, env_params, spec = case_run.case, case_run.env, case_run.env_params, case_run.spec
    assert spec.env_id == case.env_id
    assert spec.library == registry.split_id(case.env_id)[0]
    assert spec.obs_shape == tuple(env.observation_space(env_params).shape)
    assert spec.max_steps == int(env_params.max_steps_in_episode)
    if "max_steps_in_episode" in dict(case.params):
        assert spec.max_steps == dict(case.params)["max_steps_in_episode"]
    assert spec.action_mask == case.action_mask
    assert spec.keyed_reset == bool(getattr(env, "keyed_reset", True))
    space = env.action_space(env_params)
    if spec.discrete:
        assert isinstance(space, spaces.Discrete) and spec.num_actions == int(space.n)
    else:
        assert isinstance(space, spaces.Box) and spec.num_actions == int(np.prod(space.shape))
        assert len(spec.action_low) == len(spec.action_high) == spec.num_actions
        assert all(low < high for low, high in zip(spec.action_low, spec.action_high))


def test_observations_rewards_and_flags_match_the_spec(case_run):
    case, spec, first_obs, t = case_run.case, case_run.spec, case_run.first_obs, case_run.trajectory
    batch = (LANES, case.steps, case.num_envs)
    assert first_obs.shape == (LANES, case.num_envs) + spec.obs_shape
    for name in ("obs", "next_obs", "final_obs"):
        assert t[name].shape == batch + spec.obs_shape, name
        assert t[name].dtype == np.dtype(spec.obs_dtype), (name, t[name].dtype, spec.obs_dtype)
    assert first_obs.dtype == np.dtype(spec.obs_dtype)
    assert t["reward"].shape == batch and t["reward"].dtype == np.float32
    assert np.isfinite(t["reward"]).all()
    for name in ("terminated", "truncated"):
        assert t[name].shape == batch and t[name].dtype == np.bool_, name
    if spec.discrete:
        assert t["action"].shape == batch
        assert ((0 <= t["action"]) & (t["action"] < spec.num_actions)).all()
    else:
        assert int(np.prod(t["action"].shape[len(batch):])) == spec.num_actions


def test_same_key_same_episodes_and_another_key_others(case_run):
    again = jax.device_get(case_run.rollout(case_run.keys))
    for before, after in zip(jax.tree_util.tree_leaves((case_run.first_obs, case_run.trajectory)),
                             jax.tree_util.tree_leaves(again)):
        np.testing.assert_array_equal(before, after)
    other = jax.device_get(case_run.rollout(jax.random.split(jax.random.PRNGKey(1), LANES)))
    assert not np.array_equal(other[1]["next_obs"], case_run.trajectory["next_obs"])


def test_auto_reset_keeps_the_final_observation(case_run):
    t = case_run.trajectory
    done = t["terminated"] | t["truncated"]
    assert done.any(), f"no episode ended in {case_run.case.steps} steps: lower the case's time limit"
    # before an episode's end the observation returned is the one reached; at an end it is the next
    # episode's first, and the one reached is in info["final_observation"]
    np.testing.assert_array_equal(t["final_obs"][~done], t["next_obs"][~done])
    differs = (t["final_obs"][done] != t["next_obs"][done]).reshape(int(done.sum()), -1).any(axis=1)
    assert differs.mean() > 0.5, f"{differs.sum()} of {done.sum()} episode ends show a final observation"


def test_truncation_only_at_the_time_limit(case_run):
    t, limit = case_run.trajectory, case_run.spec.max_steps
    done = t["terminated"] | t["truncated"]
    if limit == 0:
        assert not t["truncated"].any()
        return
    assert t["length"].max() <= limit
    assert (t["length"][t["truncated"]] == limit).all()
    assert done[t["length"] == limit].all()


if MASKED:
    @pytest.mark.parametrize("case", MASKED, ids=str)
    def test_masked_actions_are_never_sampled(case):
        """The policy (the categorical head of an MLP, as trained) samples only legal actions."""
        from purejaxrl_opt.config.schema import NetworkConfig
        from purejaxrl_opt.core.models.distributions import Categorical
        from purejaxrl_opt.core.models.policies import make_policy

        env, env_params, spec = envs.make(case.env_id, dict(case.params))
        first_obs, trajectory = jax.device_get(make_rollout(env, env_params, spec, case.num_envs, case.steps)(
            jax.random.split(jax.random.PRNGKey(0), LANES)))
        obs = trajectory["obs"].reshape((-1,) + spec.obs_shape)
        legal = obs.reshape(obs.shape[0], -1)[:, -spec.num_actions:]
        assert set(np.unique(legal)) <= {0, 1} and (legal.sum(axis=1) >= 1).all()
        policy = make_policy(spec, NetworkConfig())
        params = policy.init(jax.random.PRNGKey(0))
        dist_params = policy.apply(params, envs.obs_norm_apply(None, jnp.asarray(obs)))
        samples = jax.vmap(lambda key: Categorical().sample(key, dist_params))(
            jax.random.split(jax.random.PRNGKey(1), 64))
        chosen = np.take_along_axis(legal, np.asarray(samples).T, axis=1)
        assert (chosen == 1).all(), f"{(chosen == 0).sum()} illegal actions sampled"


# ----------------------------------------------------------------------------- CartPole by hand
def _one(tree):
    return jax.tree_util.tree_map(lambda x: x[0], tree)


def test_cartpole_time_limit_truncates_and_does_not_terminate():
    """``env.params.max_steps_in_episode = 5``, alternating pushes (the pole stays up): steps 1-4 go
    on, step 5 is truncated, not terminated; the final observation is the library's own step_env
    result, the returned one the reset of the step's reset key (gymnax's split)."""
    env, env_params, spec = envs.make("CartPole-v1", {"max_steps_in_episode": 5})
    assert spec.max_steps == 5
    step = jax.jit(lambda keys, state, action: envs.step_batch(env, env_params, keys, state, action))
    _, state = envs.reset_batch(env, env_params, jax.random.PRNGKey(3)[None])
    for t in range(5):
        key = jax.random.PRNGKey(100 + t)
        action = jnp.asarray([t % 2])
        step_key, reset_key = jax.random.split(key)
        reached, *_ = env.step_env(step_key, _one(state), action[0], env_params)
        obs, state, reward, terminated, truncated, info = step(key[None], state, action)
        # the same arithmetic, compiled differently (vmapped under jit vs eager): equal to float32 rounding
        np.testing.assert_allclose(info["final_observation"][0], reached, rtol=1e-6, atol=1e-7)
        assert float(reward[0]) == 1.0 and not bool(terminated[0])
        assert bool(truncated[0]) == (t == 4), t
    np.testing.assert_allclose(obs[0], env.reset_env(reset_key, env_params)[0], rtol=1e-6, atol=1e-7)
    assert int(_one(state).time) == 0  # a fresh episode


def test_cartpole_fall_terminates_and_does_not_truncate():
    """Always pushing right: the pole falls long before the 500-step limit: terminated, not truncated,
    and the final observation is past CartPole's thresholds while every earlier one is within them."""
    env, env_params, spec = envs.make("CartPole-v1")
    step = jax.jit(lambda keys, state, action: envs.step_batch(env, env_params, keys, state, action))
    obs, state = envs.reset_batch(env, env_params, jax.random.PRNGKey(0)[None])

    def outside(o):
        return abs(float(o[0])) > env_params.x_threshold or abs(float(o[2])) > env_params.theta_threshold_radians

    for t in range(spec.max_steps):
        assert not outside(obs[0])
        obs, state, _, terminated, truncated, info = step(jax.random.PRNGKey(t)[None], state, jnp.asarray([1]))
        if bool(terminated[0]) or bool(truncated[0]):
            break
    assert t < 50 and bool(terminated[0]) and not bool(truncated[0])
    assert outside(info["final_observation"][0]) and not outside(obs[0])


def test_prefixed_and_bare_gymnax_ids_are_the_same_env():
    bare, prefixed = envs.make("CartPole-v1"), envs.make("gymnax/CartPole-v1", {"max_steps_in_episode": 500})
    assert type(bare[0]) is type(prefixed[0]) and bare[1] == prefixed[1]
    assert bare[2] == dataclasses.replace(prefixed[2], env_id="CartPole-v1")


def test_an_env_batch_step_is_used_and_kept_by_the_observation_mask():
    """``step_batch`` is the env's own when it has one (a batch-level reset, e.g. Craftax's optimistic
    one), and MaskedObservation masks what it returns."""
    from gymnax.environments.classic_control.cartpole import CartPole

    class BatchStepped(CartPole):
        def step_batch(self, keys, state, action, params):
            obs, state, reward, terminated, truncated, info = jax.vmap(
                self.step, in_axes=(0, 0, 0, None))(keys, state, action, params)
            return obs + 1.0, state, reward, terminated, truncated, dict(info, batch_level=True)

    env = BatchStepped()
    env_params = env.default_params
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    obs, state = envs.reset_batch(env, env_params, keys)
    plain = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, jnp.zeros(2, jnp.int32), env_params)
    stepped = envs.step_batch(env, env_params, keys, state, jnp.zeros(2, jnp.int32))
    assert bool(stepped[5]["batch_level"])
    np.testing.assert_array_equal(stepped[0], plain[0] + 1.0)
    masked = envs.MaskedObservation(env, np.asarray([1, 0, 1, 0], np.float32))
    out = envs.step_batch(masked, env_params, keys, state, jnp.zeros(2, jnp.int32))
    assert bool(out[5]["batch_level"])
    np.testing.assert_array_equal(out[0], (plain[0] + 1.0) * np.asarray([1, 0, 1, 0], np.float32))
    np.testing.assert_array_equal(out[5]["final_observation"],
                                  plain[5]["final_observation"] * np.asarray([1, 0, 1, 0], np.float32))


# ----------------------------------------------------------------------------- the registry
def test_an_unknown_library_lists_the_libraries():
    with pytest.raises(ConfigError) as error:
        envs.make("nolibrary/Thing-v0")
    message = str(error.value)
    assert "'env.id'" in message and "unknown library 'nolibrary'" in message
    for library in ("gymnax", "navix", "xminigrid", "jumanji", "craftax", "playground", "brax"):
        assert f"'{library}'" in message


@pytest.mark.parametrize("env_id,library", [("gymnax/NoSuchEnv-v0", "gymnax"), ("tokens/Nope-v0", "tokens"),
                                            ("navix/Nope-v0", "navix"), ("xminigrid/Nope", "xminigrid"),
                                            ("jumanji/Nope-v0", "jumanji"),
                                            ("craftax/Nope-v1", "craftax"), ("playground/Nope", "playground"),
                                            ("brax/nope", "brax")])
def test_an_unknown_id_lists_the_library_ids(env_id, library):
    with pytest.raises(ConfigError) as error:
        envs.make(env_id)
    message = str(error.value)
    assert f"{library} has no env" in message
    for known in registry.ids(library):
        assert f"'{known}'" in message
    assert "MNISTBandit-bsuite" not in message  # not offered: it downloads MNIST when built


def test_an_unknown_bare_id_lists_gymnax_and_token_ids_and_the_prefix_form():
    with pytest.raises(ConfigError) as error:
        envs.make("NoSuchEnv-v0")
    message = str(error.value)
    assert "'CartPole-v1'" in message and "'Addition-v0'" in message and "'<library>/<id>'" in message


def test_a_library_that_is_not_installed_names_its_extra(monkeypatch):
    """A registry entry whose adapter imports a library that does not exist in this environment."""
    monkeypatch.setitem(registry.LIBRARIES, "notinstalled",
                        registry.Library("tests.adapter_of_a_missing_library", "notinstalled"))
    for call in (lambda: envs.make("notinstalled/Anything-v0"),
                 lambda: _validate_env_id("notinstalled/Anything-v0")):
        with pytest.raises(ConfigError) as error:
            call()
        message = str(error.value)
        assert "pip install -e '.[notinstalled]'" in message
        assert "purejaxrl_opt_library_that_is_not_installed" in message


def test_a_registry_entry_without_its_adapter_module_says_so(monkeypatch):
    monkeypatch.setitem(registry.LIBRARIES, "noadapter", registry.Library("purejaxrl_opt.envs.noadapter", "x"))
    with pytest.raises(ConfigError, match="adapter module purejaxrl_opt.envs.noadapter is not part"):
        envs.make("noadapter/Thing-v0")


def _validate_env_id(env_id: str):
    from purejaxrl_opt.config.schema import EnvConfig

    EnvConfig(id=env_id).validate("env")


def test_config_validates_ids_through_the_registry():
    from purejaxrl_opt.config.schema import supported_env_ids

    _validate_env_id("gymnax/CartPole-v1")
    _validate_env_id("tests.task_fixtures:Parity")  # a user's task, by module:Class
    _validate_env_id("tokens/tests.task_fixtures:Parity")
    with pytest.raises(ConfigError, match="'env.id' = 'gymnax/Nope'"):
        _validate_env_id("gymnax/Nope")
    bare = supported_env_ids()
    assert "CartPole-v1" in bare and "Addition-v0" in bare and "MNISTBandit-bsuite" not in bare
    assert supported_env_ids("gymnax") == tuple(f"gymnax/{i}" for i in registry.ids("gymnax"))


def test_env_params_are_checked_by_the_adapter():
    with pytest.raises(ConfigError, match="unknown config key 'env.params.nope' for CartPole-v1"):
        envs.make("gymnax/CartPole-v1", {"nope": 1})
    with pytest.raises(ConfigError, match="env.params"):
        envs.make("tokens/Addition-v0", {"split": 7})


# ----------------------------------------------------------------------------- refusals from the spec
def _spec(**fields):
    return envs.EnvSpec("lib/Masked-v0", (7,), True, 3, None, None, 10, library="lib", **fields)


def test_normalising_masked_observations_is_refused_before_compiling():
    from purejaxrl_opt.core import algos
    from purejaxrl_opt.config.schema import EnvConfig, RunConfig
    from purejaxrl_opt.core.algos.ppo import PPOConfig

    run = RunConfig(algo=PPOConfig(), env=EnvConfig(id="CartPole-v1", normalize_obs=True))
    algos.check_env_fit(run, _spec(action_mask=False))
    with pytest.raises(ConfigError, match="'env.normalize_obs' = True is invalid on lib/Masked-v0"):
        algos.check_env_fit(run, _spec(action_mask=True))


def test_grpo_same_start_groups_need_a_keyed_reset():
    from purejaxrl_opt.core import algos
    from purejaxrl_opt.config.schema import EnvConfig, RunConfig
    from purejaxrl_opt.core.algos.grpo import GRPOConfig

    run = RunConfig(algo=GRPOConfig(), env=EnvConfig(id="CartPole-v1"))
    algos.check_env_fit(run, _spec(keyed_reset=True))
    with pytest.raises(ConfigError, match="'algo.grouping' = 'same_start' is invalid on lib/Masked-v0"):
        algos.check_env_fit(run, _spec(keyed_reset=False))
    unrelated = RunConfig(algo=GRPOConfig(grouping="unrelated"), env=EnvConfig(id="CartPole-v1"))
    algos.check_env_fit(unrelated, _spec(keyed_reset=False))


def test_gif_rendering_goes_through_the_protocol_or_is_refused():
    from purejaxrl_opt import evaluate

    def route(env_id):
        env, _, spec = envs.make(env_id)
        return evaluate.render_route(SimpleNamespace(env=env, spec=spec))

    assert route("gymnax/CartPole-v1") == "gymnax"
    with pytest.raises(ValueError, match="gymnax cannot render DeepSea-bsuite"):
        route("DeepSea-bsuite")
    with pytest.raises(ValueError, match="the tokens env has no render_frame"):
        route("Addition-v0")

    class Rendered:  # an env of the protocol with its own frames
        def render_frame(self, state, params):
            return jnp.zeros((4, 4, 3), jnp.uint8)

    assert evaluate.render_route(SimpleNamespace(env=Rendered(), spec=_spec())) == "render_frame"

    class NoGL(Rendered):  # one that says it cannot render on this machine: refused with its reason
        def render_problem(self):
            return "no OpenGL here"

    with pytest.raises(ValueError, match="--gif: no OpenGL here"):
        evaluate.render_route(SimpleNamespace(env=NoGL(), spec=_spec()))


# ----------------------------------------------------------------------------- Hydra names
@pytest.fixture(scope="module")
def conf_with_a_library_env(tmp_path_factory):
    """conf/ plus an env file of a library (conf/env/<library>/<id>.yaml) and its tuned file."""
    conf = tmp_path_factory.mktemp("conf") / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "env" / "gymnax").mkdir()
    (conf / "env" / "gymnax" / "Acrobot-v1.yaml").write_text(
        "id: gymnax/Acrobot-v1\nnormalize_obs: false\nnormalize_reward: false\nclip_actions: true\n"
        "params: {max_steps_in_episode: 100}\nobs_mask: null\n")
    (conf / "tuned" / "ppo_gymnax").mkdir()
    (conf / "tuned" / "ppo_gymnax" / "Acrobot-v1.yaml").write_text(
        "# @package _global_\ntotal_timesteps: 12288\nalgo:\n  lr: 0.001\n")
    return conf


def _compose(conf: Path, overrides: list[str]):
    return compose(overrides, conf=conf)


def test_env_library_id_is_a_config_group_with_its_tuned_file(conf_with_a_library_env):
    from purejaxrl_opt.config.schema import from_dictconfig

    run = from_dictconfig(_compose(conf_with_a_library_env, ["env=gymnax/Acrobot-v1"]))
    assert run.env.id == "gymnax/Acrobot-v1" and dict(run.env.params) == {"max_steps_in_episode": 100}
    assert run.total_timesteps == 12288 and run.algo.lr == 0.001  # conf/tuned/ppo_gymnax/Acrobot-v1.yaml


def test_any_id_without_a_file_takes_the_library_defaults_and_no_tuned_file():
    from purejaxrl_opt.config.schema import from_dictconfig

    cfg = _compose(ROOT / "conf", ["algo=trpo", "env=any", "env.id=gymnax/CartPole-v1"])
    run = from_dictconfig(cfg)
    tuned = _compose(ROOT / "conf", ["algo=trpo", "env=CartPole-v1"])
    assert run.env.id == "gymnax/CartPole-v1" and dict(run.env.params) == {}
    # conf/tuned/trpo_CartPole-v1.yaml (max_kl 0.005) is not applied: TRPOConfig's default 0.01 is
    assert tuned.algo.max_kl == 0.005 and run.algo.max_kl == 0.01
    with pytest.raises(ConfigError, match="gymnax has no env 'Nope'"):
        from_dictconfig(_compose(ROOT / "conf", ["env=any", "env.id=gymnax/Nope"]))
