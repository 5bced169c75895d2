"""GRPO's loss options against hand computations (TRL GRPOTrainer's semantics), DAPO's dynamic
sampling and overlong penalty, the frozen reference, and exact step counters."""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxrl_opt.core import algos
from purejaxrl_opt.core.stages import losses, rollout
from purejaxrl_opt.core.algos import grpo
from purejaxrl_opt.config.schema import ConfigError, EnvConfig, NetworkConfig, RunConfig, hyperparameters
from purejaxrl_opt.core.algos.grpo import GRPOConfig
from purejaxrl_opt.core.algos.base import host_metrics
from purejaxrl_opt.envs.tokens import EOS

# two episodes of a batch: 3 and 2 real steps
MASK = np.array([[True, True, True], [True, True, False]])
LOGP = np.log(np.array([[0.5, 0.2, 0.9], [0.3, 0.6, 0.4]]))
LOGP_OLD = np.log(np.array([[0.4, 0.25, 0.3], [0.5, 0.1, 0.4]]))
LOGP_REF = np.log(np.array([[0.45, 0.3, 0.6], [0.2, 0.4, 0.7]]))
ADV = np.array([[1.5, 1.5, 1.5], [-0.8, -0.8, -0.8]])
ENTROPY = np.array([[0.7, 0.1, 0.4], [0.9, 0.3, 0.2]])


def hand_loss(cfg: GRPOConfig, loss_norm: str, mask=MASK):
    """-J(theta) written out step by step in numpy (float64), from TRL's definitions."""
    eps = cfg.epsilon
    eps_high = cfg.epsilon_high or eps
    E, T = mask.shape
    per_step = np.zeros((E, T))
    for i in range(E):
        n = mask[i].sum()
        seq = sum(LOGP[i, t] - LOGP_OLD[i, t] for t in range(T) if mask[i, t]) / max(n, 1)
        for t in range(T):
            log_ratio = seq if cfg.importance_sampling_level == "sequence" else LOGP[i, t] - LOGP_OLD[i, t]
            ratio = np.exp(log_ratio)
            unclipped = min(ratio, cfg.delta) if cfg.delta > 0 else ratio
            clipped = min(max(ratio, 1 - eps), 1 + eps_high)
            surrogate = min(unclipped * ADV[i, t], clipped * ADV[i, t])
            q = np.exp(LOGP_REF[i, t] - LOGP[i, t])  # pi_ref / pi
            k3 = q - np.log(q) - 1
            if cfg.kl_importance_weight:
                k3 *= np.exp(LOGP[i, t] - LOGP_OLD[i, t])
            per_step[i, t] = surrogate - cfg.beta * k3 + cfg.ent_coef * ENTROPY[i, t]
    masked = np.where(mask, per_step, 0.0)
    if loss_norm == "sequence":  # TRL grpo: per-sequence mean, then mean over sequences
        objective = np.mean([masked[i].sum() / max(mask[i].sum(), 1) for i in range(E)])
    elif loss_norm == "token":  # TRL bnpo/dapo: over every token of the batch
        objective = masked.sum() / max(mask.sum(), 1)
    else:  # TRL dr_grpo: batch size x max completion length
        objective = masked.sum() / (E * T)
    return -objective


def jax_loss(cfg: GRPOConfig, mask=MASK):
    hparams = hyperparameters(cfg)
    loss, diagnostics = grpo.policy_objective(
        *(jnp.asarray(x, jnp.float32) for x in (LOGP, LOGP_OLD, LOGP_REF, ENTROPY, ADV)),
        jnp.asarray(mask), hparams, cfg.reduction, cfg)
    return float(loss), diagnostics


@pytest.mark.parametrize("loss_type, loss_norm", [("grpo", "sequence"), ("bnpo", "token"),
                                                  ("dr_grpo", "constant"), ("dapo", "token")])
@pytest.mark.parametrize("options", [
    {},
    {"importance_sampling_level": "sequence"},  # GSPO
    {"delta": 1.25, "epsilon": 0.1},  # two-sided clipping: the cap binds where A < 0
    {"kl_importance_weight": True},
    {"epsilon_high": 0.28, "ent_coef": 0.05},
])
def test_objective_matches_the_hand_computation(loss_type, loss_norm, options):
    cfg = GRPOConfig(loss_type=loss_type, **options)
    assert cfg.reduction == loss_norm
    expected = hand_loss(cfg, loss_norm)
    np.testing.assert_allclose(jax_loss(cfg)[0], expected, rtol=1e-5, atol=1e-7)
    # loss_norm given directly is the same loss
    direct = GRPOConfig(loss_norm=loss_norm, **options)
    assert jax_loss(direct)[0] == jax_loss(cfg)[0]


def test_each_option_changes_the_loss():
    """The hand examples exercise every option (none is silently a no-op on them)."""
    base = jax_loss(GRPOConfig())[0]
    for options in ({"importance_sampling_level": "sequence"}, {"delta": 1.25, "epsilon": 0.1},
                    {"kl_importance_weight": True}, {"loss_type": "dapo"}, {"loss_type": "dr_grpo"}):
        assert jax_loss(GRPOConfig(**options))[0] != base, options


def test_gspo_ratio_is_the_length_normalised_sequence_ratio():
    log_ratio = np.asarray(losses.sequence_log_ratio(jnp.asarray(LOGP), jnp.asarray(LOGP_OLD),
                                                     jnp.asarray(MASK)))
    expected = [np.log((0.5 * 0.2 * 0.9) / (0.4 * 0.25 * 0.3)) / 3, np.log((0.3 * 0.6) / (0.5 * 0.1)) / 2]
    np.testing.assert_allclose(log_ratio[:, 0], expected, rtol=1e-6)
    # the clip fraction counts whole episodes: here both sequence ratios are outside [0.8, 1.2]
    _, diag = jax_loss(GRPOConfig(importance_sampling_level="sequence"))
    assert float(diag["clip_frac"]) == 1.0


def test_weighted_k3_by_hand_and_exactly_unbiased_under_the_old_policy():
    # one action: pi = 0.5, pi_ref = 0.25, pi_old = 0.4
    k3 = 0.5 - np.log(0.5) - 1  # pi_ref/pi - log(pi_ref/pi) - 1
    got = losses.k3_kl(jnp.log(0.5), jnp.log(0.25), jnp.log(0.4))
    np.testing.assert_allclose(float(got), 1.25 * k3, rtol=1e-6)
    np.testing.assert_allclose(float(losses.k3_kl(jnp.log(0.5), jnp.log(0.25))), k3, rtol=1e-6)
    # exact expectations over a 4-action categorical: actions drawn from pi_old
    pi = np.array([0.1, 0.4, 0.3, 0.2])
    old = np.array([0.25, 0.25, 0.3, 0.2])
    ref = np.array([0.4, 0.2, 0.2, 0.2])
    kl = float(np.sum(pi * np.log(pi / ref)))
    weighted = np.asarray(losses.k3_kl(jnp.log(pi), jnp.log(ref), jnp.log(old)))
    plain = np.asarray(losses.k3_kl(jnp.log(pi), jnp.log(ref)))
    np.testing.assert_allclose(np.sum(old * weighted), kl, rtol=1e-5)  # unbiased at any pi
    assert abs(np.sum(old * plain) - kl) > 0.05  # unweighted: biased once pi != pi_old
    np.testing.assert_allclose(np.sum(pi * plain), kl, rtol=1e-5)  # ... and unbiased under pi


def test_mask_truncated_completions_drops_answers_without_eos():
    action = jnp.asarray([[3, 4, 5], [3, EOS, 0]])  # first answer hit the limit without <eos>
    truncated = np.asarray(grpo.truncated_answers(action, jnp.asarray(MASK)))
    np.testing.assert_array_equal(truncated, [True, False])
    loss_mask = MASK & ~truncated[:, None]
    cfg = GRPOConfig(loss_type="bnpo")
    np.testing.assert_allclose(jax_loss(cfg, loss_mask)[0], hand_loss(cfg, "token", loss_mask),
                               rtol=1e-5)
    # what is left is the second answer's own token mean
    expected = hand_loss(cfg, "token", np.array([[False] * 3, [True, True, False]]))
    np.testing.assert_allclose(jax_loss(cfg, loss_mask)[0], expected, rtol=1e-6)


def test_overlong_penalty_by_hand():
    # limit 10, buffer 4: free up to 6 tokens, then -(|o| - 6) / 4
    got = np.asarray(grpo.overlong_penalty(jnp.asarray([5, 6, 7, 9, 10]), 10, 4, 1.0))
    np.testing.assert_allclose(got, [0.0, 0.0, -0.25, -0.75, -1.0])
    np.testing.assert_allclose(np.asarray(grpo.overlong_penalty(jnp.asarray([8]), 10, 4, 0.5)),
                               [-0.25])
    # it enters the outcome (on the last real token) before the group z-score
    cfg = GRPOConfig(num_groups=1, group_size=2, overlong_buffer=1)
    rewards = jnp.asarray([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])  # both correct; the second is 3 long
    mask = jnp.asarray([[True, True, False], [True, True, True]])
    adv, outcomes, spread = grpo.group_signal(cfg, rewards, mask, hyperparameters(cfg))
    np.testing.assert_allclose(np.asarray(outcomes), [1.0, 0.0])
    assert bool(spread[0]) and float(adv[0, 0]) > 0 > float(adv[1, 0])


def test_dynamic_sampling_keeps_groups_with_spread_in_fixed_shapes():
    spread = jnp.asarray([False, True, False, True, True, False])
    np.testing.assert_array_equal(np.asarray(grpo.select_groups(spread, 2)), [1, 3])
    np.testing.assert_array_equal(np.asarray(grpo.select_groups(spread, 3)), [1, 3, 4])
    # fewer groups with spread than slots: the rest are zero-spread groups, in sampling order
    np.testing.assert_array_equal(np.asarray(grpo.select_groups(spread, 5)), [1, 3, 4, 0, 2])
    # take_groups gathers whole groups (group size 2) along each field's episode axis
    B, T = 12, 3
    episode = jnp.arange(B, dtype=jnp.float32)
    batch = rollout.GroupBatch(
        obs=jnp.broadcast_to(episode[None, :, None], (T, B, 4)), action=jnp.broadcast_to(episode, (T, B)),
        log_prob=jnp.broadcast_to(episode, (T, B)), reward=jnp.broadcast_to(episode, (T, B)),
        mask=jnp.ones((T, B), bool), returns=episode, lengths=episode.astype(jnp.int32),
        correct=jnp.zeros(B, bool), reward_terms=jnp.broadcast_to(episode[:, None], (B, 2)))
    kept = grpo.take_groups(batch, jnp.asarray([1, 3]), 2)
    for name, x in kept._asdict().items():
        values = np.asarray(x)
        column = values[0] if name in ("obs", "action", "log_prob", "reward", "mask") else values
        if name in ("mask", "correct"):
            continue
        np.testing.assert_array_equal(column.reshape(4, -1)[:, 0], [2, 3, 6, 7], err_msg=name)


# --------------------------------------------------------------------------- config
def _run(env_id="CartPole-v1", **algo):
    return RunConfig(algo=GRPOConfig(**algo), env=EnvConfig(id=env_id))


@pytest.mark.parametrize("algo, needle", [
    ({"loss_type": "ppo"}, r"algo\.loss_type.*'grpo', 'bnpo', 'dr_grpo', 'dapo'"),
    ({"loss_type": "grpo", "loss_norm": "token"}, r"algo\.loss_norm.*loss_type=grpo"),
    ({"importance_sampling_level": "episode"}, r"algo\.importance_sampling_level.*'token', 'sequence'"),
    ({"delta": 1.1}, r"algo\.delta.*> 1 \+ max\(epsilon, epsilon_high\) = 1\.2"),
    ({"delta": 1.25, "epsilon_high": 0.28}, r"algo\.delta.*1\.28"),
    ({"dynamic_sampling_oversample": 0}, r"algo\.dynamic_sampling_oversample.*>= 1"),
    ({"mask_truncated_completions": True}, r"algo\.mask_truncated_completions.*token env"),
    ({"overlong_buffer": 2}, r"algo\.overlong_buffer.*token env"),
    ({"overlong_penalty": -1.0}, r"algo\.overlong_penalty"),
])
def test_bad_options_are_refused_naming_the_key(algo, needle):
    with pytest.raises(ConfigError, match=needle):
        _run(**algo).validate()


def test_overlong_buffer_must_be_below_the_answer_limit():
    run = _run("Addition-v0", overlong_buffer=4)  # 1-2 digit addition: answers of up to 4 tokens
    run.validate()
    with pytest.raises(ConfigError, match=r"algo\.overlong_buffer.*below the answer limit 4"):
        algos.make_algorithm(run)


# --------------------------------------------------------------------------- the reference, counters
def test_reference_is_scored_with_frozen_observation_statistics():
    """With env.normalize_obs, an update moves the running statistics; pi_ref's log-probs on the
    same raw observations do not move (its statistics are frozen with its parameters), while
    scoring the reference parameters with the current statistics would. At the refresh
    (ref_update_every=2: after the second update) parameters and statistics move together."""
    run = RunConfig(algo=GRPOConfig(num_groups=2, group_size=2, num_minibatches=1, update_epochs=1,
                                    ref_update_every=2, lr=0.05, max_episode_steps=16),
                    env=EnvConfig(id="CartPole-v1", normalize_obs=True), total_timesteps=1000)
    run.validate()
    algo = algos.make_algorithm(run)
    hparams = algo.default_hparams()
    update = jax.jit(algo.update)
    state0 = algo.init(jax.random.PRNGKey(0), hparams)
    state1, _ = update(state0, hparams, jnp.asarray(0))
    state2, _ = update(state1, hparams, jnp.asarray(1))
    assert not np.allclose(state1.obs_norm.mean, state0.obs_norm.mean)  # the statistics moved
    obs = jax.random.normal(jax.random.PRNGKey(1), (3, 5, 4)) * 2.0
    action = jnp.zeros((3, 5), jnp.int32)

    def ref(state):
        return np.asarray(grpo.reference_log_probs(algo.policy, algo.dist, state, obs, action))

    np.testing.assert_array_equal(ref(state1), ref(state0))
    moving = state1.replace(ref_obs_norm=state1.obs_norm)  # the moving target it used to be
    assert np.abs(ref(moving) - ref(state0)).max() > 1e-4
    for new, snap in zip(jax.tree_util.tree_leaves((state2.params["actor"], state2.obs_norm)),
                         jax.tree_util.tree_leaves((state2.ref_params, state2.ref_obs_norm))):
        np.testing.assert_array_equal(new, snap)


def test_step_counters_are_exact_past_float32():
    """The budget counters are unsigned ints: 2^24 + 1 steps is not 2^24 (float32 would round it,
    and a lane with that budget would never stop)."""
    run = RunConfig(algo=GRPOConfig(), env=EnvConfig(id="CartPole-v1"), total_timesteps=2**24 + 1)
    algo = algos.make_algorithm(run)
    state = algo.init(jax.random.PRNGKey(0), algo.default_hparams())
    assert state.env_steps.dtype == jnp.uint32
    at = state.replace(env_steps=jnp.asarray(2**24, jnp.uint32))
    assert bool(algo.lane_active(at))
    assert not bool(algo.lane_active(at.replace(env_steps=at.env_steps + jnp.uint32(1))))
    assert float(jnp.float32(2**24) + jnp.float32(1)) == 2**24  # what a float32 counter would do


NET = NetworkConfig(kind="transformer", d_model=32, num_layers=1, num_heads=2, mlp_ratio=2)


@pytest.mark.slow  # a token-env compile (~13 s on 2 cores); the gymnax DAPO/GSPO run stays fast
def test_dapo_style_gspo_run_on_a_token_env_counts_every_sampled_step():
    """Dynamic sampling (2x oversampled groups), GSPO's ratio, two-sided clipping, truncated-answer
    masking and the overlong penalty together on Addition-v0, inside one compile: the metrics are
    finite, ``episodes`` counts every sampled answer and the budget counts all their tokens."""
    cfg = GRPOConfig(num_groups=4, group_size=4, num_minibatches=2, update_epochs=2, loss_type="dapo",
                     importance_sampling_level="sequence", delta=1.5, epsilon_high=0.28,
                     mask_truncated_completions=True, dynamic_sampling_oversample=2, overlong_buffer=1,
                     beta=0.0)
    run = RunConfig(algo=cfg, env=EnvConfig(id="Addition-v0", params={"min_digits": 1, "max_digits": 1}),
                    network=NET, total_timesteps=600, eval_episodes=4)
    run.validate()
    out = jax.jit(algos.make_train(run))(jax.random.PRNGKey(0))
    metrics = host_metrics(out.metrics)
    ran = np.isfinite(metrics["env_steps"])
    assert ran.sum() >= 3
    np.testing.assert_array_equal(metrics["episodes"][ran], 32)  # 2 x 4 groups x 4 answers
    per_update = np.diff(np.concatenate([[0.0], metrics["env_steps"][ran]]))
    np.testing.assert_allclose(per_update, 32 * metrics["episode_length"][ran], rtol=1e-6)
    assert metrics["env_steps"][ran][-1] >= 600 > metrics["env_steps"][ran][-2]
    for name in ("kept_fraction", "spread_fraction", "policy_loss", "clip_frac"):
        assert np.all(np.isfinite(metrics[name][ran])), name
    assert np.all((metrics["kept_fraction"][ran] >= 0) & (metrics["kept_fraction"][ran] <= 1))
    # the kept groups are those with spread first: at least as many as among all sampled ones
    assert np.all(metrics["kept_fraction"][ran] + 1e-6 >= np.minimum(1.0, 2 * metrics["spread_fraction"][ran]))


# token-level ratios are GRPO's default, trained in the fast tier by tests/test_grpo.py
@pytest.mark.parametrize("level", [pytest.param("token", marks=pytest.mark.slow), "sequence"])
def test_dynamic_sampling_and_gspo_on_a_gymnax_env(level):
    """Catch (every episode 9 steps): 2x oversampling rolls 2 x 2 groups x 2 episodes = 72 steps an
    update, all counted; the block path (token ratio) and the whole-episode path (GSPO's sequence
    ratio, which the block path cannot cut) both train."""
    run = RunConfig(algo=GRPOConfig(num_groups=2, group_size=2, num_minibatches=2,
                                    dynamic_sampling_oversample=2, importance_sampling_level=level),
                    env=EnvConfig(id="Catch-bsuite"), total_timesteps=300)
    run.validate()
    algo = algos.make_algorithm(run)
    assert grpo.uses_block_path(algo.spec, algo.policy, run.algo) == (level == "token")
    out = jax.jit(algos.make_train(run))(jax.random.PRNGKey(0))
    steps = host_metrics(out.metrics)["env_steps"]
    ran = np.isfinite(steps)
    np.testing.assert_array_equal(steps[ran], 72 * np.arange(1, 6))  # ceil(300 / 72) = 5 updates
    np.testing.assert_array_equal(np.asarray(out.metrics["episodes"])[ran], 8)
    assert np.all(np.isfinite(np.asarray(out.metrics["policy_loss"])[ran]))
    kept = np.asarray(out.metrics["kept_fraction"])[ran]
    assert np.all((kept >= 0) & (kept <= 1))
