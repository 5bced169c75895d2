"""Brax PPO's choices as options (docs/algorithms.md, "Brax PPO's choices"): the tanh-squashed Gaussian
(``network.action_dist=tanh_normal``), constant reward scaling (``env.reward_scale``), Brax's
observation statistics (``env.obs_norm_style=brax``), Brax's initialisation (``network.init=lecun_uniform``)
and Adam's epsilon (``algo.adam_eps``), each against Brax's own functions (brax 0.14, installed with the
playground extra) or a hand computation, and a short CLI run with all of them on."""

from __future__ import annotations

import csv
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxrl_opt import envs
from purejaxrl_opt.config.schema import ConfigError, EnvConfig, NetworkConfig, RunConfig
from purejaxrl_opt.core.algos import make_algorithm
from purejaxrl_opt.core.algos.grpo import GRPOConfig
from purejaxrl_opt.core.algos.ppo import PPOConfig
from purejaxrl_opt.core.algos.trpo import TRPOConfig
from purejaxrl_opt.core.models.distributions import TanhNormal, for_spec
from tests.conftest import cli, compose


# Brax is imported by the tests that use it, not at collection (it imports MJX and Warp: seconds in
# every test worker)
@pytest.fixture(scope="module")
def brax_distribution():
    return pytest.importorskip("brax.training.distribution")


@pytest.fixture(scope="module")
def running_statistics():
    return pytest.importorskip("brax.training.acme.running_statistics")


D = 3


def _tanh_params(key, shape=(256, D)):
    """Random ``loc``/``raw_scale`` with pre-tanh samples reaching deep into tanh's saturation."""
    k_loc, k_raw = jax.random.split(key)
    return {"loc": 3.0 * jax.random.normal(k_loc, shape), "raw_scale": 2.0 * jax.random.normal(k_raw, shape)}


def _brax(params):
    """The same parameters as Brax's policy output: ``concat([loc, raw_scale], -1)``."""
    return jnp.concatenate([params["loc"], params["raw_scale"]], axis=-1)


# ----------------------------------------------------------------------------- tanh_normal
def test_tanh_normal_is_brax_normal_tanh_distribution(brax_distribution):
    """Sample, log-prob, entropy, mode and KL against brax.training.distribution.NormalTanhDistribution
    (as make_ppo_networks builds it) on the same parameters and keys. The same float32 formulas: sample,
    log-prob and mode agree to 1e-6 relative; the entropy estimate to 1e-5 (summed terms); the KL to
    1e-5 relative or 1e-3 absolute (Brax's adds 1e-5 to the ratio of scales inside its log)."""
    ours, brax = TanhNormal(), brax_distribution.NormalTanhDistribution(event_size=D)
    params = _tanh_params(jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(1)
    u = ours.sample(key, params)
    np.testing.assert_allclose(u, brax.sample_no_postprocessing(_brax(params), key), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours.postprocess(u), brax.sample(_brax(params), key), rtol=1e-6, atol=1e-7)
    assert float(jnp.abs(u).max()) > 9.0  # saturated: tanh(u) is +-1 in float32 there
    log_prob = ours.log_prob(params, u)
    assert np.isfinite(np.asarray(log_prob)).all()
    np.testing.assert_allclose(log_prob, brax.log_prob(_brax(params), u), rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(ours.entropy(params, key), brax.entropy(_brax(params), key), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(ours.postprocess(ours.mode(params)), brax.mode(_brax(params)), rtol=1e-6)
    other = _tanh_params(jax.random.PRNGKey(2))
    # Brax's kl_divergence(old) is KL(old || self)
    brax_kl = brax.create_dist(_brax(other)).kl_divergence(brax.create_dist(_brax(params)))
    np.testing.assert_allclose(ours.kl(params, other), brax_kl, rtol=1e-5, atol=1e-3)
    # Brax's scale, min_std 0.001 included
    np.testing.assert_allclose(ours.scale(params), brax.create_dist(_brax(params)).scale, rtol=1e-6)


def test_tanh_normal_log_prob_by_hand_is_the_density_of_the_squashed_action():
    """One log-prob in float64 by hand: the Gaussian density of u = arctanh(a) over |da/du| = 1 - a^2;
    and the stored pre-tanh sample keeps it finite where a = tanh(u) rounds to 1."""
    loc, raw, u = 0.3, -0.4, 0.8
    scale = math.log1p(math.exp(raw)) + 0.001
    a = math.tanh(u)
    by_hand = (-0.5 * ((math.atanh(a) - loc) / scale) ** 2 - math.log(scale * math.sqrt(2 * math.pi))
               - math.log(1 - a * a))
    params = {"loc": jnp.full((1, 1), loc), "raw_scale": jnp.full((1, 1), raw)}
    np.testing.assert_allclose(float(TanhNormal().log_prob(params, jnp.full((1, 1), u))[0]), by_hand, rtol=1e-6)
    far = float(TanhNormal().log_prob({"loc": jnp.full((1, 1), 20.0), "raw_scale": jnp.zeros((1, 1))},
                                      jnp.full((1, 1), 20.0))[0])
    # log N(20; 20, s) - log(1 - tanh(20)^2) with log(1 - tanh(u)^2) = log 4 - 2u - 2 log(1 + e^-2u)
    scale = math.log(2.0) + 0.001
    np.testing.assert_allclose(far, -math.log(scale * math.sqrt(2 * math.pi)) - (math.log(4.0) - 40.0),
                               rtol=1e-6)


def test_tanh_normal_maps_onto_the_env_bounds_and_keeps_brax_bounds_exact():
    """Pendulum's torque bounds are [-2, 2]: the action is 2 tanh(u); an env with [-1, 1] (Brax's and
    Playground's) gets tanh(u) itself. Either way inside the bounds, so clip_actions changes nothing."""
    _, _, pendulum = envs.make("Pendulum-v1")
    u = jnp.asarray([[-30.0], [-0.5], [0.0], [0.7], [30.0]])
    squashed = for_spec(False, "tanh_normal", pendulum).postprocess(u)
    np.testing.assert_allclose(squashed, 2.0 * np.tanh(np.asarray(u)), rtol=1e-6)
    np.testing.assert_array_equal(envs.to_env_action(pendulum, squashed, True), squashed)
    _, _, mountain_car = envs.make("MountainCarContinuous-v0")  # bounds [-1, 1]
    assert mountain_car.action_low == (-1.0,) and mountain_car.action_high == (1.0,)
    np.testing.assert_array_equal(for_spec(False, "tanh_normal", mountain_car).postprocess(u), jnp.tanh(u))


# the exactness of TRPO's pieces (KL, Fisher) is in the fast tier (above and tests/test_math.py)
@pytest.mark.slow
def test_tanh_normal_trpo_step_keeps_its_exact_kl_inside_the_trust_region():
    """TRPO with tanh_normal: the KL is the pre-squash Gaussians' (exact) and its Fisher the Hessian of
    that KL (tests/test_math.py); one trust-region step on a random batch moves the policy, and the mean
    KL it reports stays within max_kl."""
    from purejaxrl_opt.core.algos.trpo import make_parts

    run = RunConfig(algo=TRPOConfig(num_envs=4, num_steps=32, max_kl=0.01), env=EnvConfig(id="Pendulum-v1"),
                    network=NetworkConfig(action_dist="tanh_normal", hidden_sizes=(16,)), total_timesteps=128)
    run.validate()
    _, _, spec = envs.make("Pendulum-v1")
    parts = make_parts(run, spec)
    params = parts.networks.policy.init(jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (128, 3))
    action = parts.dist.sample(jax.random.PRNGKey(2), parts.networks.policy.apply(params, obs))
    advantages = jax.random.normal(jax.random.PRNGKey(3), (128,))
    hparams = {"cg_damping": jnp.float32(0.1), "backtrack_coeff": jnp.float32(0.8)}
    new, metrics = jax.jit(parts.policy_step)(params, obs, action, advantages, jax.random.PRNGKey(4), hparams,
                                              jnp.float32(0.01))
    assert 0.0 < float(metrics["kl"]) <= 0.01 * 1.001
    assert np.isfinite(float(metrics["entropy"]))
    dist_old, dist_new = parts.networks.policy.apply(params, obs), parts.networks.policy.apply(new, obs)
    np.testing.assert_allclose(float(jnp.mean(parts.dist.kl(dist_old, dist_new))), float(metrics["kl"]), rtol=1e-4)


# ----------------------------------------------------------------------------- obs_norm_style=brax
def test_brax_obs_norm_is_brax_running_statistics(running_statistics):
    """Three updates with rollout-shaped batches [T, N, D] (entries of very different means and
    scales, one constant entry) against brax's running_statistics.init_state/update/normalize: equal to
    float32 rounding (1e-6 relative); and the statistics are those of all the data (float64)."""
    rng = np.random.default_rng(0)
    ours = envs.brax_obs_norm_init((4,))
    brax = running_statistics.init_state(jax.ShapeDtypeStruct((4,), jnp.float32))
    seen = []
    for step in range(3):
        batch = rng.normal([5.0, -200.0, 0.0, 3.0], [0.1, 50.0, 1e-3, 0.0], size=(16, 8, 4)).astype(np.float32)
        seen.append(batch.reshape(-1, 4))
        if step == 0:  # Brax's first rollout acts on raw observations (mean 0, std 1): so do we
            np.testing.assert_array_equal(envs.obs_norm_apply(ours, batch), batch)
        ours = envs.brax_obs_norm_update(ours, jnp.asarray(batch))
        brax = running_statistics.update(brax, jnp.asarray(batch))
        assert int(ours.count) == int(brax.count.lo) and int(brax.count.hi) == 0
        for name in ("mean", "summed_variance", "std"):
            np.testing.assert_allclose(getattr(ours, name), getattr(brax, name), rtol=1e-6, atol=1e-6, err_msg=name)
        probe = rng.normal(size=(5, 4)).astype(np.float32) * 100
        np.testing.assert_allclose(envs.obs_norm_apply(ours, probe), running_statistics.normalize(probe, brax),
                                   rtol=1e-6)
    data = np.concatenate(seen).astype(np.float64)
    np.testing.assert_allclose(ours.mean, data.mean(0), rtol=1e-5)
    # the constant entry's std is floored at 1e-6, as Brax's (no epsilon, no clipping of the data)
    np.testing.assert_allclose(ours.std, np.maximum(data.std(0), 1e-6), rtol=1e-4)
    assert float(ours.std[3]) == pytest.approx(1e-6)


# ----------------------------------------------------------------------------- the stage, all three on
@pytest.fixture(scope="module")
def stage_rollout():
    """One rollout through the PPO/TRPO stage with reward_scale 0.1, Brax's observation statistics and
    tanh_normal (20-step episodes, so some end inside it), from statistics of an earlier rollout; and the
    same rollout collected directly (same key) with those statistics."""
    from purejaxrl_opt.core.stages import rollout
    from purejaxrl_opt.core.stages.actor_critic import make_stage

    run = RunConfig(algo=PPOConfig(num_envs=4, num_steps=32),
                    env=EnvConfig(id="Pendulum-v1", reward_scale=0.1, normalize_obs=True, obs_norm_style="brax",
                                  params={"max_steps_in_episode": 20}),
                    network=NetworkConfig(action_dist="tanh_normal"), total_timesteps=128)
    run.validate()
    env, env_params, spec = envs.make(run.env.id, dict(run.env.params))
    stage = make_stage(run, env, env_params, spec)
    parts = stage.init(jax.random.PRNGKey(0))
    assert isinstance(parts.obs_norm, envs.BraxObsNormState) and int(parts.obs_norm.count) == 0
    # statistics of an earlier rollout, so that acting with them differs from acting with the updated ones
    earlier = 3.0 * jax.random.normal(jax.random.PRNGKey(5), (64, 3))
    before = envs.brax_obs_norm_update(parts.obs_norm, earlier)
    hparams = {"gamma": jnp.float32(0.9), "gae_lambda": jnp.float32(0.95)}
    key = jax.random.PRNGKey(1)
    exp = stage.experience(parts.actor_params, parts.critic_params, before, parts.env, key, hparams)
    _, batch, stats = rollout.collect(env, env_params, spec, stage.dist, stage.policy.apply, parts.actor_params,
                                      before, parts.env, key, 32, True)
    return stage, parts, earlier, before, exp, batch, stats


def test_reward_scale_multiplies_the_rewards_gae_sees_and_not_the_episode_returns(stage_rollout):
    """GAE by hand (float64) on 0.1 x the rollout's rewards, with the critic's values of the observations
    normalised by the updated statistics; the episode statistics are the env's own returns."""
    stage, parts, _, _, exp, batch, stats = stage_rollout
    reward, done = np.asarray(batch.reward, np.float64), np.asarray(batch.done)
    normalised = envs.obs_norm_apply(exp.obs_norm, batch.obs)
    values = np.asarray(stage.value.apply(parts.critic_params, normalised), np.float64)
    next_values = np.asarray(stage.value.apply(parts.critic_params, envs.obs_norm_apply(exp.obs_norm, batch.final_obs)),
                             np.float64)
    terminated = np.asarray(batch.terminated)
    advantages, running = np.zeros_like(reward), np.zeros(4)
    for t in reversed(range(32)):
        delta = 0.1 * reward[t] + 0.9 * (1 - terminated[t]) * next_values[t] - values[t]
        running = delta + 0.9 * 0.95 * (1 - done[t]) * running
        advantages[t] = running
    np.testing.assert_allclose(exp.transitions.advantages, advantages.reshape(-1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(exp.transitions.returns, (advantages + values).reshape(-1), rtol=1e-4, atol=1e-5)
    assert float(exp.stats.count) == 4  # the 4 envs' first episodes ended at step 20
    # the episodes' returns are the env's: the sum of its rewards over those 20 steps
    np.testing.assert_array_equal(exp.stats.return_sum, stats.return_sum)
    np.testing.assert_allclose(float(exp.stats.return_sum), reward[:20].sum(), rtol=1e-5)


def test_brax_obs_norm_updates_before_the_policy_step_and_the_rollout_acts_on_the_old(stage_rollout,
                                                                                      running_statistics):
    """Brax's order in the stage: the rollout acts with the statistics it was given (its log-probs are
    theirs); the statistics then absorb the rollout's observations (as Brax's update), and the values and
    the minibatches' observations read the updated ones; the next state's statistics are those."""
    stage, parts, earlier, before, exp, batch, _ = stage_rollout
    after = running_statistics.update(running_statistics.update(
        running_statistics.init_state(jax.ShapeDtypeStruct((3,), jnp.float32)), earlier), batch.obs)
    np.testing.assert_allclose(exp.obs_norm.mean, after.mean, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(exp.obs_norm.std, after.std, rtol=1e-6)
    assert int(exp.obs_norm.count) == 64 + 128
    normalised = running_statistics.normalize(batch.obs, after)
    np.testing.assert_allclose(exp.transitions.obs, np.asarray(normalised).reshape(128, 3), rtol=1e-5, atol=1e-6)
    # the rollout's log-probs: of the stored pre-tanh actions, under the statistics it acted with
    np.testing.assert_array_equal(exp.transitions.log_prob_old, np.asarray(batch.log_prob).reshape(-1))
    acted = stage.policy.apply(parts.actor_params, running_statistics.normalize(batch.obs, before))
    np.testing.assert_allclose(stage.dist.log_prob(acted, batch.action), batch.log_prob, rtol=1e-5, atol=1e-5)
    values = stage.value.apply(parts.critic_params, normalised)
    np.testing.assert_allclose(exp.transitions.value_old, np.asarray(values).reshape(-1), rtol=1e-5, atol=1e-6)
    assert stage.next_obs_norm(before, exp) is exp.obs_norm


# ----------------------------------------------------------------------------- initialisation and Adam
def _kernels(params) -> dict[str, np.ndarray]:
    return {jax.tree_util.keystr(path): np.asarray(leaf)
            for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0] if path[-1].key == "kernel"}


def test_lecun_uniform_init_draws_brax_mlp_kernels():
    """``network.init=lecun_uniform``: every dense kernel of actor and critic (the outputs too) is drawn
    from the distribution of Brax's ``networks.MLP`` (its default kernel_init; Playground's 5 x 256
    value network here), biases zero. Checked against Brax's own MLP by a two-sample KS test on the
    256 x 256 layers (65,536 draws a side), which the default orthogonal init fails; and by the bound
    sqrt(3 / fan_in) that every draw of the small layers keeps."""
    from scipy.stats import ks_2samp

    networks = pytest.importorskip("brax.training.networks")
    sizes = (256,) * 5
    brax_mlp = networks.MLP(layer_sizes=list(sizes) + [1])
    brax_params = brax_mlp.init(jax.random.PRNGKey(1), jnp.zeros((1, 3)))
    brax_hidden = [k for k in _kernels(brax_params).values() if k.shape == (256, 256)]
    assert len(brax_hidden) == 4

    def ours(init):
        run = RunConfig(algo=PPOConfig(num_envs=4, num_steps=32), env=EnvConfig(id="Pendulum-v1"),
                        network=NetworkConfig(init=init, hidden_sizes=(32, 32), critic_hidden_sizes=sizes,
                                              action_dist="tanh_normal", log_std_init=0.0), total_timesteps=128)
        run.validate()
        alg = make_algorithm(run)
        return alg.init(jax.random.PRNGKey(0), alg.default_hparams()).params

    params = ours("lecun_uniform")
    kernels = _kernels(params)
    hidden = [k for name, k in kernels.items() if k.shape == (256, 256)]
    assert len(hidden) == 4
    for mine, theirs in zip(hidden, brax_hidden):
        assert ks_2samp(mine.ravel(), theirs.ravel()).pvalue > 1e-3
    for name, kernel in kernels.items():
        assert np.abs(kernel).max() <= np.sqrt(3.0 / kernel.shape[0]) * (1 + 1e-6), name
    biases = [leaf for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0] if path[-1].key == "bias"]
    assert biases and all(not np.any(np.asarray(b)) for b in biases)
    orthogonal = [k for k in _kernels(ours("orthogonal")).values() if k.shape == (256, 256)]
    assert ks_2samp(orthogonal[0].ravel(), brax_hidden[0].ravel()).pvalue < 1e-6


def test_adam_eps_enters_the_first_step_as_by_hand():
    """Adam's first step is ``-lr * g / (|g| + eps)`` (bias-corrected moments of one gradient): with a
    gradient of 1e-6, PureJaxRL's eps 1e-5 takes 1/11 of the step Brax's 1e-8 takes."""
    from purejaxrl_opt.core.stages.optim import adam

    grad = jnp.array([1e-6, -2.0, 0.5])
    for eps in (1e-5, 1e-8):
        optimizer = adam({"max_grad_norm": 1e6}, 0.1, eps=eps)
        updates, _ = optimizer.update(grad, optimizer.init(jnp.zeros(3)))
        np.testing.assert_allclose(np.asarray(updates), -0.1 * np.asarray(grad) / (np.abs(np.asarray(grad)) + eps),
                                   rtol=1e-5)


def test_reset_envs_every_starts_every_env_afresh_at_those_updates():
    """``algo.reset_envs_every=N``: before every N-th update's rollout all envs restart (Brax's
    num_resets_per_eval), so no finished episode is longer than N rollouts of ``num_steps``; without it,
    CartPole's episodes run across rollouts. Where no reset falls due, the first update is the one without it."""
    from purejaxrl_opt.core import algos

    def lengths(reset_every):
        run = RunConfig(algo=PPOConfig(num_envs=8, num_steps=16, num_minibatches=2, update_epochs=1,
                                       reset_envs_every=reset_every),
                        env=EnvConfig(id="CartPole-v1"), total_timesteps=8 * 16 * 24)
        run.validate()
        out = jax.jit(algos.make_train(run))(jax.random.PRNGKey(5))
        episodes, length = np.asarray(out.metrics["episodes"]), np.asarray(out.metrics["episode_length"])
        return length[episodes > 0], out

    never, plain = lengths(0)
    assert never.max() > 16  # a rollout's finished episodes averaging more than a rollout: they spanned rollouts
    for every in (1, 2):
        cut, _ = lengths(every)
        assert len(cut) > 0 and cut.max() <= 16 * every, (every, cut.max())
    # never due within the run: the cond leaves the envs alone, so the first update (before the two
    # programs' float rounding, which differs with the cond in the program, can compound) is the same
    _, not_due = lengths(100)
    for name in ("return_mean", "episode_length", "episodes"):
        np.testing.assert_array_equal(np.asarray(not_due.metrics[name])[0], np.asarray(plain.metrics[name])[0])
    np.testing.assert_allclose(np.asarray(not_due.metrics["policy_loss"])[0],
                               np.asarray(plain.metrics["policy_loss"])[0], rtol=1e-3)


@pytest.mark.slow  # a GRU's training program compiles for tens of seconds on 2 CPU cores
def test_reset_envs_every_with_a_recurrent_network():
    """The reset with a GRU (whose carry also holds each env's hidden state, zeroed by the same
    ``fresh_carry`` as init's): the episodes are cut at N rollouts and the run trains (finite losses).
    That the hidden state is zeroed is not observed here."""
    from purejaxrl_opt.core import algos

    run = RunConfig(algo=PPOConfig(num_envs=8, num_steps=16, num_minibatches=2, update_epochs=1, reset_envs_every=2),
                    env=EnvConfig(id="CartPole-v1"), network=NetworkConfig(recurrent="gru", hidden_sizes=(16,)),
                    total_timesteps=8 * 16 * 12)
    run.validate()
    out = jax.jit(algos.make_train(run))(jax.random.PRNGKey(5))
    episodes, length = np.asarray(out.metrics["episodes"]), np.asarray(out.metrics["episode_length"])
    assert episodes.sum() > 0 and length[episodes > 0].max() <= 32
    assert np.isfinite(np.asarray(out.metrics["policy_loss"])).all()


# ----------------------------------------------------------------------------- validation and the CLI
@pytest.mark.parametrize("overrides, fragment", [
    (["network.action_dist=beta"], "'network.action_dist' = 'beta' is invalid: must be one of ['gaussian', "
                                   "'tanh_normal']"),
    (["network.action_dist=tanh_normal"], "'network.action_dist' = 'tanh_normal' is invalid on CartPole-v1"),
    (["algo=grpo", "network.action_dist=tanh_normal", "env=Pendulum-v1"], "'network.action_dist' = "
                                                                          "'tanh_normal' is invalid"),
    (["env=Pendulum-v1", "network.action_dist=tanh_normal", "network.log_std_init=-0.5"],
     "'network.log_std_init' = -0.5"),
    (["env.reward_scale=0"], "'env.reward_scale' = 0.0 is invalid: must be > 0"),
    (["env.reward_scale=10", "env.normalize_reward=true"], "'env.reward_scale' = 10.0 is invalid: must be 1.0 "
                                                           "with env.normalize_reward=true"),
    (["network.init=xavier"], "'network.init' = 'xavier' is invalid: must be one of ['orthogonal', 'lecun_uniform']"),
    (["env=Addition-v0", "network=transformer", "network.init=lecun_uniform"],
     "'network.init' = 'lecun_uniform' is invalid: must be orthogonal with network.kind=transformer"),
    (["algo.reset_envs_every=-1"], "'algo.reset_envs_every' = -1 is invalid: must be >= 0"),
    (["algo.adam_eps=0"], "'algo.adam_eps' = 0.0 is invalid: must be > 0"),
    (["env.obs_norm_style=acme"], "'env.obs_norm_style' = 'acme' is invalid: must be one of ['project', 'brax']"),
    (["env.obs_norm_style=brax"], "'env.obs_norm_style' = 'brax' is invalid: must be 'project' with "
                                  "env.normalize_obs=false"),
])
def test_bad_brax_options_fail_before_compiling(tmp_path, no_compile, overrides, fragment):
    from purejaxrl_opt.train import run_from_config

    with pytest.raises(ConfigError) as info:
        run_from_config(compose(overrides), str(tmp_path))
    assert fragment in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_defaults_add_no_state_and_keep_the_gaussian():
    run = RunConfig(algo=PPOConfig(num_envs=4, num_steps=32), env=EnvConfig(id="Pendulum-v1", normalize_obs=True),
                    total_timesteps=128)
    run.validate()
    alg = make_algorithm(run)
    state = alg.init(jax.random.PRNGKey(0), alg.default_hparams())
    assert isinstance(state.obs_norm, envs.ObsNormState) and "log_std" in state.params["actor"]["params"]
    assert not alg.dist.entropy_needs_key


@pytest.fixture(scope="module")
def brax_options_cli_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("brax_options")
    proc = cli("env=Pendulum-v1", "algo=ppo", "network.action_dist=tanh_normal", "env.reward_scale=0.1",
               "network.init=lecun_uniform", "algo.adam_eps=1e-8",
               "env.normalize_reward=false", "env.normalize_obs=true", "env.obs_norm_style=brax",
               "algo.num_envs=4", "algo.num_steps=100",
               "algo.num_minibatches=4", "total_timesteps=2400", "num_seeds=1", "eval_episodes=2", "logger=none",
               f"hydra.run.dir={out}", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_a_cli_run_with_every_brax_option_trains_and_reports_env_returns(brax_options_cli_run):
    """PPO on Pendulum-v1 through the CLI with tanh_normal, reward_scale 0.1, Brax's observation
    statistics, Brax's initialisation and Adam epsilon: every metric finite, and the training returns in the env's units (a 200-step episode
    of a fresh policy returns about -1000 to -1600; scaled by 0.1 it would be above -170)."""
    with open(brax_options_cli_run / "metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 6
    for name in ("policy_loss", "value_loss", "entropy", "approx_kl"):
        assert all(math.isfinite(float(row[name])) for row in rows), name
    returns = [float(row["return_mean"]) for row in rows if row["return_mean"] not in ("", "nan")]
    assert returns and max(returns) < -500, returns
    summary = json.loads((brax_options_cli_run / "summary.json").read_text())
    assert summary["config"]["network"]["action_dist"] == "tanh_normal"
    assert summary["config"]["env"]["obs_norm_style"] == "brax"
    assert summary["config"]["network"]["init"] == "lecun_uniform" and summary["config"]["algo"]["adam_eps"] == 1e-8


def test_checkpoints_of_runs_before_these_keys_still_match_at_their_defaults():
    """The fingerprint leaves the options out at their defaults (a checkpoint written before they existed
    resumes), and names them once set."""
    from purejaxrl_opt.formats.checkpoint import fingerprint

    base = RunConfig(algo=PPOConfig(num_envs=4, num_steps=32), env=EnvConfig(id="Pendulum-v1"), total_timesteps=128)
    config = fingerprint(base, None, ())["config"]
    assert "reward_scale" not in config["env"] and "obs_norm_style" not in config["env"]
    assert "action_dist" not in config["network"] and "init" not in config["network"]
    assert "adam_eps" not in config["algo"]
    changed = RunConfig(algo=PPOConfig(num_envs=4, num_steps=32, adam_eps=1e-8),
                        env=EnvConfig(id="Pendulum-v1", reward_scale=10.0),
                        network=NetworkConfig(action_dist="tanh_normal", init="lecun_uniform"), total_timesteps=128)
    config = fingerprint(changed, None, ())["config"]
    assert config["env"]["reward_scale"] == 10.0 and config["network"]["action_dist"] == "tanh_normal"
    assert config["network"]["init"] == "lecun_uniform" and config["algo"]["adam_eps"] == 1e-8


# one agent's envs over 4 simulated devices (tests/test_parallel.py): Brax's statistics are those of the
# global batch on every device, so the run equals the one-device run within float tolerance (the rollouts
# differ in the last bits after the first pmean-ed update); tanh_normal's
# sampled entropy draws per device, so it is checked to train, not to match
@pytest.mark.slow
def test_brax_options_data_parallel():
    from tests.test_parallel import DATA_PARALLEL_PRELUDE, run_with_devices

    out = run_with_devices(DATA_PARALLEL_PRELUDE + """
from purejaxrl_opt.config.schema import EnvConfig, NetworkConfig, RunConfig
def make(action_dist):
    run = RunConfig(algo=PPOConfig(num_envs=8, num_steps=32, update_epochs=1, num_minibatches=1),
                    env=EnvConfig(id="Pendulum-v1", normalize_obs=True, obs_norm_style="brax", reward_scale=0.1),
                    network=NetworkConfig(action_dist=action_dist), total_timesteps=8 * 32 * 4, eval_episodes=2)
    run.validate()
    return run
one, _ = train(make("gaussian"), 1)
four, _ = train(make("gaussian"), 4)
for a, b in zip(jax.tree_util.tree_leaves(one.algo_state.obs_norm), jax.tree_util.tree_leaves(four.algo_state.obs_norm)):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-4, atol=1e-5)
jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6),
                       one.algo_state.params, four.algo_state.params)
tanh, tanh_eval = train(make("tanh_normal"), 4)
assert all(np.isfinite(np.asarray(v)).all() for k, v in tanh.metrics.items() if k not in ("return_mean", "episode_length"))
assert np.isfinite(tanh_eval).all()
print("BRAX_DATA_OK")
""", timeout=400)
    assert "BRAX_DATA_OK" in out
