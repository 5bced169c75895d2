"""The MuJoCo Playground / Brax adapter against the real libraries (purejaxrl_opt/envs/playground.py).

Two envs, each built and compiled once for the module: Playground's CartpoleBalance (dm_control suite)
and Brax's inverted_pendulum. Everything the adapter claims is compared with the raw library env
stepped by hand: observations, rewards, the pre-reset observation at a time limit, and the library's
own termination.
"""

from __future__ import annotations

import os
from functools import partial

import numpy as np
import pytest

# headless rendering (render_frame): mujoco picks its OpenGL backend when first imported
os.environ.setdefault("MUJOCO_GL", "egl")
pytest.importorskip("mujoco_playground")
pytest.importorskip("brax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from gymnax.environments import spaces  # noqa: E402

from purejaxrl_opt import envs
from purejaxrl_opt.core.stages import rollout  # noqa: E402
from purejaxrl_opt.envs import playground as pg  # noqa: E402
from purejaxrl_opt.core.models.distributions import DiagGaussian  # noqa: E402
from purejaxrl_opt.config.errors import ConfigError  # noqa: E402
from tests import cli_lifecycle  # noqa: E402

SHORT = 5  # a short time limit for the auto-reset tests (params.max_steps_in_episode)


class Compiled:
    """One env with its jitted test programs (each compiled once), shared by every test of the module."""

    def __init__(self, env_id):
        self.env, self.params, self.spec = envs.make(env_id)
        self.raw = self.env.raw_env
        self.probe = jax.jit(partial(_probe, self.env))
        self.episode = jax.jit(partial(_run_episode, self.env))  # one compile per actions length


def _probe(env, key, action, params):
    """One reset and one step of the adapter, and the same on the raw library env."""
    reset_key, step_key = jax.random.split(key)
    obs0, state0 = env.reset(reset_key, params)
    stepped = env.step(step_key, state0, action, params)
    raw = env.raw_env.step(env.raw_env.reset(reset_key), action)
    return obs0, state0.time, stepped, stepped[1].time, raw.obs, raw.reward


@pytest.fixture(scope="module")
def cartpole():
    return Compiled("playground/CartpoleBalance")


@pytest.fixture(scope="module")
def pendulum():
    return Compiled("brax/inverted_pendulum")


@pytest.fixture(params=["cartpole", "pendulum"])
def any_env(request):
    return request.getfixturevalue(request.param)


def _run_episode(env, key, actions, params):
    """``env.step`` under scan over ``actions [T, D]`` from ``reset(key)``, and the raw library env
    stepped by hand from ``raw.reset(key)`` with the same actions. Returns ``(first obs, step keys,
    per-step (obs, reward, terminated, truncated, final_observation, time), raw per-step (obs,
    reward), raw.reset(reset key of the last step).obs)``."""
    obs, state = env.reset(key, params)

    def _step(state, inputs):
        step_key, action = inputs
        obs, state, reward, terminated, truncated, info = env.step(step_key, state, action, params)
        return state, (obs, reward, terminated, truncated, info["final_observation"], state.time)

    def _raw_step(state, action):
        state = env.raw_env.step(state, action)
        return state, (state.obs, state.reward)

    keys = jax.random.split(jax.random.fold_in(key, 1), actions.shape[0])
    out = jax.lax.scan(_step, state, (keys, actions))[1]
    raw = jax.lax.scan(_raw_step, env.raw_env.reset(key), actions)[1]
    last_reset = env.raw_env.reset(jax.random.split(keys[-1])[1]).obs  # gymnax: key_step, key_reset
    return obs, keys, out, raw, last_reset


def _episode(compiled, params, key, actions):
    return compiled.episode(key, actions, params)


def _actions(compiled):
    """The action sequence of each env's episode tests (one length per env: one compile): a whole
    default-length CartpoleBalance episode of gentle pushes; 60 full pushes on the inverted pendulum."""
    if compiled.env.env_id.startswith("playground/"):
        steps = compiled.params.max_steps_in_episode
        return 0.3 * jnp.sin(jnp.arange(steps, dtype=jnp.float32) / 20.0)[:, None]
    return jnp.ones((60, 1), jnp.float32)


# --------------------------------------------------------------------------- spaces and determinism
def test_defaults_and_spaces(cartpole, pendulum):
    assert cartpole.params.max_steps_in_episode == 1000  # Playground's dm_control config
    assert pendulum.params.max_steps_in_episode == 1000  # brax.envs.create's default
    for c in (cartpole, pendulum):
        space = c.env.action_space(c.params)
        assert isinstance(space, spaces.Box) and space.shape == (c.raw.action_size,)
        assert float(space.low) == -1.0 and float(space.high) == 1.0
        raw_obs = jax.eval_shape(c.raw.reset, jax.random.PRNGKey(0)).obs
        assert c.spec.obs_shape == raw_obs.shape and not c.spec.discrete
        assert c.spec.max_steps == 1000


@pytest.mark.slow  # an MJX compile per env; test_env_contract.py's Playground case (also slow) checks it too
def test_shapes_dtypes_match_spaces(any_env):
    c = any_env
    action = c.env.action_space(c.params).sample(jax.random.PRNGKey(1))
    obs, time0, stepped, time1, raw_obs, raw_reward = c.probe(jax.random.PRNGKey(0), action, c.params)
    obs2, _, reward, terminated, truncated, info = stepped
    obs_space = c.env.observation_space(c.params)
    assert obs.shape == obs_space.shape and obs.dtype == obs_space.dtype == jnp.float32
    assert int(time0) == 0 and int(time1) == 1
    assert obs2.shape == obs_space.shape and obs2.dtype == jnp.float32
    assert reward.shape == () and reward.dtype == jnp.float32
    assert terminated.shape == () and terminated.dtype == jnp.bool_
    assert truncated.shape == () and truncated.dtype == jnp.bool_
    assert info["final_observation"].shape == obs_space.shape
    # the adapter's step is the library's step: same observation and reward
    np.testing.assert_array_equal(np.asarray(obs2), np.asarray(raw_obs))
    assert float(reward) == float(raw_reward)


@pytest.mark.slow  # an MJX compile per env; test_env_contract.py's Playground case (also slow) checks it too
def test_determinism_under_the_same_key(any_env):
    c = any_env
    actions = _actions(c)
    first = _episode(c, c.params, jax.random.PRNGKey(3), actions)
    again = _episode(c, c.params, jax.random.PRNGKey(3), actions)
    other = _episode(c, c.params, jax.random.PRNGKey(4), actions)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), first, again)
    assert not np.array_equal(np.asarray(first[0]), np.asarray(other[0]))


@pytest.mark.slow  # an MJX compile per env; test_env_contract.py's Playground case (also slow) checks it too
def test_jit_vmap_scan(any_env):
    c = any_env
    num_envs, num_steps = 4, 6
    step = jax.vmap(c.env.step, in_axes=(0, 0, 0, None))

    @jax.jit
    def run(key):
        obs, state = jax.vmap(c.env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), c.params)

        def _step(state, key):
            action_key, step_key = jax.random.split(key)
            action = jax.random.uniform(action_key, (num_envs, c.env.num_actions), minval=-1, maxval=1)
            obs, state, reward, terminated, truncated, _ = step(jax.random.split(step_key, num_envs), state,
                                                                action, c.params)
            return state, (obs, reward, terminated, truncated)

        return jax.lax.scan(_step, state, jax.random.split(key, num_steps))[1]

    obs, reward, terminated, truncated = run(jax.random.PRNGKey(5))
    assert obs.shape == (num_steps, num_envs) + c.spec.obs_shape
    assert reward.shape == terminated.shape == truncated.shape == (num_steps, num_envs)
    assert np.isfinite(np.asarray(obs)).all()
    assert not np.asarray(truncated).any()  # 6 steps of a 1000-step limit
    # envs differ (each its own reset key)
    assert not np.array_equal(np.asarray(obs[0, 0]), np.asarray(obs[0, 1]))


# --------------------------------------------------------------------------- truncation vs termination
@pytest.mark.slow  # as test_env_contract.py's Playground case (also slow), which drives it to episode_length
def test_playground_episode_to_its_limit_is_truncated_and_keeps_the_final_obs(cartpole):
    """A whole default-length (1000-step) CartpoleBalance episode run by hand: the last step is
    truncated, not terminated; its final observation is the raw env's after 1000 steps; the returned
    observation is the next episode's first."""
    c = cartpole
    limit = c.params.max_steps_in_episode
    key = jax.random.PRNGKey(6)
    actions = _actions(c)
    assert actions.shape[0] == limit
    _, keys, (obs, reward, terminated, truncated, final_obs, time), (raw_obs, raw_reward), last_reset = \
        _episode(c, c.params, key, actions)
    truncated, terminated = np.asarray(truncated), np.asarray(terminated)
    assert truncated[-1] and not terminated[-1]
    assert not truncated[:-1].any() and not terminated.any()
    assert int(time[-1]) == 0 and int(time[-2]) == limit - 1  # the step counter restarted

    np.testing.assert_allclose(np.asarray(final_obs[-1]), np.asarray(raw_obs[-1]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(reward), np.asarray(raw_reward), rtol=1e-5, atol=1e-5)
    # before the limit the observation is the stepped one; at it, the reset of the step's reset key
    np.testing.assert_array_equal(np.asarray(obs[:-1]), np.asarray(final_obs[:-1]))
    np.testing.assert_array_equal(np.asarray(obs[-1]), np.asarray(last_reset))
    assert not np.allclose(np.asarray(obs[-1]), np.asarray(final_obs[-1]))


# a second MJX build and compile; the adapter's flags are checked on CartpoleBalance in the fast
# tier
@pytest.mark.slow
def test_brax_termination_is_terminated_not_truncated(pendulum):
    """A constant push topples Brax's inverted pendulum: the library's done (|angle| > 0.2) is
    ``terminated``, not ``truncated``; the final observation shows the fallen pole, the next is a reset."""
    c = pendulum
    actions = _actions(c)
    _, _, (obs, _, terminated, truncated, final_obs, time), _, _ = _episode(c, c.params, jax.random.PRNGKey(7),
                                                                            actions)
    terminated, truncated = np.asarray(terminated), np.asarray(truncated)
    assert terminated.any() and not truncated.any()
    t = int(np.argmax(terminated))
    assert abs(float(final_obs[t, 1])) > 0.2 and (np.abs(np.asarray(final_obs[:t, 1])) <= 0.2).all()
    assert abs(float(obs[t, 1])) <= 0.01  # reset: angle uniform in [-0.01, 0.01]
    assert int(time[t]) == 0 and int(time[t - 1]) == t


# its two halves: the contract suite's truncated CartpoleBalance episodes keep their real final
# observation (slow tier), and tests/test_math.py's GAE bootstraps a truncation from it (fast tier)
@pytest.mark.slow
def test_gae_bootstraps_a_truncated_playground_step_from_its_real_final_obs(cartpole):
    """rollout.collect + gae on CartpoleBalance with a 5-step limit: the advantage of the truncated
    step is ``r + gamma V(real last obs) - V(obs)``, the real last obs being the raw env's after the
    same 5 actions, not the reset observation the env continues from."""
    c = cartpole
    params = c.params.replace(max_steps_in_episode=SHORT)
    dims = c.env.num_actions
    actor = lambda _, obs: {"mean": jnp.zeros(obs.shape[:-1] + (dims,)),  # noqa: E731
                            "log_std": jnp.full(obs.shape[:-1] + (dims,), -1.0)}
    weights = jnp.arange(1.0, c.spec.obs_shape[0] + 1.0)
    value = lambda obs: obs @ weights  # noqa: E731
    gamma, gae_lambda = 0.9, 0.8

    @jax.jit
    def run(key):
        reset_key, collect_key = jax.random.split(key)
        carry = rollout.reset_carry(c.env, params, reset_key, 2)
        _, batch, stats = rollout.collect(c.env, params, c.spec, DiagGaussian(), actor, None, None, carry,
                                          collect_key, SHORT + 2)
        advantages, _ = rollout.gae(batch.reward, value(batch.obs), value(batch.final_obs), batch.terminated,
                                    batch.done, gamma, gae_lambda)
        # the real last observation of env 0: its reset key, then the same (clipped) actions, raw env
        raw = c.raw.reset(rollout.env_keys(reset_key, 2)[0])
        raw = jax.lax.fori_loop(0, SHORT, lambda t, raw: c.raw.step(raw, jnp.clip(batch.action[t, 0], -1.0, 1.0)),
                                raw)
        return batch, advantages, stats, raw.obs

    key = jax.random.PRNGKey(8)
    batch, advantages, stats, real_last = run(key)
    t = SHORT - 1
    assert np.asarray(batch.done)[t].all() and not np.asarray(batch.terminated).any()
    assert int(stats.count) == 2

    real_last = np.asarray(real_last)
    np.testing.assert_allclose(np.asarray(batch.final_obs[t, 0]), real_last, rtol=1e-6, atol=1e-6)
    expected = float(batch.reward[t, 0]) + gamma * float(real_last @ weights) - float(value(batch.obs[t, 0]))
    np.testing.assert_allclose(float(advantages[t, 0]), expected, rtol=1e-5, atol=1e-5)
    # bootstrapping from the reset observation would give another number
    from_reset = float(batch.reward[t, 0]) + gamma * float(value(batch.obs[t + 1, 0])) - float(value(batch.obs[t, 0]))
    assert abs(from_reset - expected) > 1e-2


# --------------------------------------------------------------------------- options
def test_options_are_validated_before_building():
    with pytest.raises(ConfigError, match=r"env\.params\.nope.*allowed.*episode_length"):
        pg.make("CartpoleBalance", {"nope": 1}, "playground")
    with pytest.raises(ConfigError, match=r"env\.params\.impl.*\['jax', 'warp'\]"):
        pg.make("CartpoleBalance", {"impl": "cuda"}, "playground")
    with pytest.raises(ConfigError, match=r"env\.params\.config\.nope.*allowed.*ctrl_dt"):
        pg.make("CartpoleBalance", {"config": {"nope": 1}}, "playground")
    with pytest.raises(ConfigError, match=r"env\.params\.config\.episode_length.*env\.params\.episode_length"):
        pg.make("CartpoleBalance", {"config": {"episode_length": 5}}, "playground")
    with pytest.raises(ConfigError, match=r"env\.params\.episode_length"):
        pg.make("CartpoleBalance", {"episode_length": 0}, "playground")
    with pytest.raises(ConfigError, match=r"env\.params\.backend.*generalized"):
        pg.make("ant", {"backend": "nope"}, "brax")
    with pytest.raises(ConfigError, match=r"env\.params\.config\.nope.*ctrl_cost_weight"):
        pg.make("ant", {"config": {"nope": 1}}, "brax")
    with pytest.raises(ConfigError, match=r"env\.params\.impl.*allowed"):
        pg.make("ant", {"impl": "jax"}, "brax")
    with pytest.raises(ConfigError, match=r"unknown env 'brax/nope'.*inverted_pendulum"):
        pg.make("nope", {}, "brax")
    with pytest.raises(ConfigError, match=r"unknown env 'playground/nope'.*CartpoleBalance"):
        pg.make("nope", {}, "playground")
    assert "CheetahRun" in pg.ids("playground") and "halfcheetah" in pg.ids("brax")


@pytest.mark.skipif(pg._LIBRARY_MENAGERIE.exists(), reason="mujoco_menagerie is on disk here")
def test_menagerie_envs_are_refused_without_downloading(monkeypatch):
    monkeypatch.delenv("MENAGERIE_ROOT", raising=False)
    with pytest.raises(ConfigError, match=r"mujoco_menagerie.*git clone.*MENAGERIE_ROOT"):
        pg.make("Go1JoystickFlatTerrain", {}, "playground")
    assert "Go1JoystickFlatTerrain" in pg.ids("playground")  # listed; refused when built
    assert not pg._LIBRARY_MENAGERIE.exists()  # nothing was fetched


@pytest.mark.slow  # a third env build and compile
def test_episode_length_and_action_repeat_options():
    """brax/inverted_pendulum with 3 library steps per agent step: the limit is ceil(10 / 3) agent
    steps and one agent step is the raw env's 3 steps, rewards summed."""
    env, params = pg.make("inverted_pendulum", {"episode_length": 10, "action_repeat": 3}, "brax")
    assert params.max_steps_in_episode == 4
    key = jax.random.PRNGKey(9)
    action = jnp.asarray([0.1])

    @jax.jit
    def run(key):
        _, state = env.reset(key, params)
        stepped = env.step(key, state, action, params)
        raw, rewards = env.raw_env.reset(key), []
        for _ in range(3):
            raw = env.raw_env.step(raw, action)
            rewards.append(raw.reward)
        return stepped, raw.obs, jnp.stack(rewards)

    (obs, _, reward, terminated, truncated, _), raw_obs, raw_rewards = run(key)
    np.testing.assert_allclose(np.asarray(obs), np.asarray(raw_obs), rtol=1e-5, atol=1e-6)
    assert float(reward) == float(raw_rewards.sum()) == 3.0 and not bool(terminated) and not bool(truncated)


@pytest.mark.slow
def test_render_frame(any_env):
    obs, state = jax.jit(any_env.env.reset)(jax.random.PRNGKey(0), any_env.params)
    frame = any_env.env.render_frame(state, any_env.params)
    assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8 and frame.std() > 0


@pytest.mark.slow  # two batched rollouts in one program: the module's largest compile
def test_step_batch_equals_vmapped_step(cartpole):
    """The batch-level auto-reset (resets computed only when an episode ended) gives exactly the
    numbers of ``vmap(env.step)``, across a time limit (5 steps) with different actions per env."""
    c = cartpole
    params = c.params.replace(max_steps_in_episode=SHORT)
    num_envs, num_steps = 3, SHORT + 2
    vmapped = jax.vmap(c.env.step, in_axes=(0, 0, 0, None))

    def run(step, key):
        _, state = jax.vmap(c.env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), params)

        def _step(state, key):
            action_key, step_key = jax.random.split(key)
            action = jax.random.uniform(action_key, (num_envs, 1), minval=-1, maxval=1)
            obs, state, reward, terminated, truncated, info = step(jax.random.split(step_key, num_envs),
                                                                   state, action, params)
            return state, (obs, reward, terminated, truncated, info["final_observation"])

        return jax.lax.scan(_step, state, jax.random.split(key, num_steps))

    key = jax.random.PRNGKey(10)
    expected, got = jax.jit(lambda key: (run(vmapped, key), run(c.env.step_batch, key)))(key)
    assert np.asarray(expected[1][3])[SHORT - 1].all()  # the limit is crossed
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), expected, got)


def test_headless_gl_picks_egl_only_where_libegl_exists():
    from purejaxrl_opt.envs.opengl import headless_gl, set_headless_gl

    found = {"EGL": "libEGL.so.1"}.get
    missing = {}.get
    assert headless_gl({}, found) == "egl"
    # a GPU machine's image without libEGL: mujoco's import fails under egl, so rendering is disabled
    assert headless_gl({}, missing) == "disable"
    # a user's choice and a display are left alone
    assert headless_gl({"MUJOCO_GL": "osmesa"}, missing) is None
    assert headless_gl({"DISPLAY": ":0"}, missing) is None
    import ctypes.util

    expected = "egl" if ctypes.util.find_library("EGL") else "disable"
    assert headless_gl({}) == expected
    environ = {}
    assert set_headless_gl(environ) == expected and environ == {"MUJOCO_GL": expected}


def test_rendering_with_gl_disabled_is_a_clear_error(cartpole, monkeypatch):
    _, state = cartpole.env.reset(jax.random.PRNGKey(0), cartpole.params)
    assert cartpole.env.render_problem() is None  # egl here (tests set it)
    monkeypatch.setenv("MUJOCO_GL", "disable")
    with pytest.raises(ValueError, match="MUJOCO_GL='disable'.*libEGL"):
        cartpole.env.render_frame(state, cartpole.params)
    # evaluate --gif asks the env first, before it compiles the evaluation
    from types import SimpleNamespace

    from purejaxrl_opt import evaluate

    with pytest.raises(ValueError, match="--gif: rendering a MuJoCo env needs OpenGL"):
        evaluate.render_route(SimpleNamespace(env=cartpole.env, spec=cartpole.spec))


def test_gif_frames_render_on_the_host(cartpole):
    """``evaluate --gif`` renders a host-only renderer (``render_in_jit = False``: MuJoCo's OpenGL)
    with the host states, outside jit; traced, ``render_frame`` failed converting the physics state to
    numpy. With OpenGL disabled it is refused instead (test_rendering_with_gl_disabled_is_a_clear_error)."""
    from purejaxrl_opt import evaluate

    if cartpole.env.render_problem():
        pytest.skip(cartpole.env.render_problem())
    assert cartpole.env.render_in_jit is False
    _, state = jax.jit(cartpole.env.reset)(jax.random.PRNGKey(0), cartpole.params)
    moved = state.replace(env_state=state.env_state.replace(
        data=state.env_state.data.replace(qpos=state.env_state.data.qpos + 0.5)))
    frames = evaluate.render_frames(cartpole.env, cartpole.params, [jax.device_get(s) for s in (state, moved)])
    assert [f.shape for f in frames] == [(240, 320, 3)] * 2 and frames[0].dtype == np.uint8
    assert frames[0].std() > 0 and not np.array_equal(frames[0], frames[1])  # the cart and pole moved


@pytest.mark.slow  # two CLI processes, each compiling MJX programs (minutes on 2 CPU cores)
def test_evaluate_gif_through_the_cli(tmp_path):
    """A tiny GRPO run on Playground through the training CLI (final checkpoint on), then
    ``python -m purejaxrl_opt.evaluate RUN --gif``: one 10-step episode rendered on the host."""
    import subprocess
    import sys

    from PIL import Image

    if pg.PlaygroundEnv.render_problem(None):
        pytest.skip(pg.PlaygroundEnv.render_problem(None))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = tmp_path / "run"
    train = subprocess.run(
        [sys.executable, "-m", "purejaxrl_opt.train", "env=playground/CartpoleBalance", "algo=grpo", "~tuned",
         "num_seeds=1", "total_timesteps=40", "algo.num_groups=1", "algo.group_size=2", "algo.num_minibatches=1",
         "algo.update_epochs=1", "+env.params.episode_length=10", "logger=none", "progress.mode=off",
         f"hydra.run.dir={run}"], cwd=root, capture_output=True, text=True, timeout=600)
    assert train.returncode == 0, train.stderr[-2000:]
    gif = tmp_path / "episode.gif"
    evaluate = subprocess.run([sys.executable, "-m", "purejaxrl_opt.evaluate", str(run), "--episodes", "1",
                               "--gif", str(gif), "--no-wandb"], cwd=root, capture_output=True, text=True,
                              timeout=600)
    assert evaluate.returncode == 0, evaluate.stderr[-2000:]
    image = Image.open(gif)
    assert image.n_frames == 10 and image.size == (320, 240)


@pytest.mark.parametrize("algo", cli_lifecycle.matrix_params("playground"))
def test_cli_train_evaluate_gif_kill_and_resume(algo, tmp_path):
    """Through the CLI with a user's defaults: train, evaluate (--gif), SIGKILL after a checkpoint,
    resume= -> metrics.csv bitwise the uninterrupted run's (tests/cli_lifecycle.py)."""
    cli_lifecycle.check_library("playground", algo, tmp_path)

