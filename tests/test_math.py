"""The math pieces against independent references (numpy loops, hand computations, closed forms)."""

from __future__ import annotations

import math

import jax
from jax.flatten_util import ravel_pytree
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxrl_opt import envs
from purejaxrl_opt.core.stages import losses, rollout
from purejaxrl_opt.core.models.distributions import Categorical, DiagGaussian, TanhNormal


def numpy_gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    """Textbook GAE, written as a plain loop over time for each env."""
    T, N = rewards.shape
    adv = np.zeros((T, N))
    for n in range(N):
        running = 0.0
        for t in reversed(range(T)):
            bootstrap = 0.0 if terminated[t, n] else next_values[t, n]
            delta = rewards[t, n] + gamma * bootstrap - values[t, n]
            episode_ends = terminated[t, n] or truncated[t, n]
            running = delta + (0.0 if episode_ends else gamma * lam * running)
            adv[t, n] = running
    return adv, adv + values


def test_gae_matches_numpy_loop_with_truncation():
    rng = np.random.default_rng(0)
    T, N = 37, 5
    rewards = rng.normal(size=(T, N)).astype(np.float32)
    values = rng.normal(size=(T, N)).astype(np.float32)
    next_values = rng.normal(size=(T, N)).astype(np.float32)
    terminated = rng.random((T, N)) < 0.08
    truncated = (rng.random((T, N)) < 0.08) & ~terminated
    assert terminated.any() and truncated.any()
    adv, ret = rollout.gae(jnp.asarray(rewards), jnp.asarray(values), jnp.asarray(next_values),
                           jnp.asarray(terminated), jnp.asarray(terminated | truncated), 0.97, 0.9)
    ref_adv, ref_ret = numpy_gae(rewards, values, next_values, terminated, truncated, 0.97, 0.9)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-5, atol=1e-5)


def test_gae_truncation_bootstraps_but_termination_does_not():
    # one env, two steps: step 0 ends the episode; only the kind of ending differs
    rewards, values = jnp.array([[1.0], [0.0]]), jnp.array([[0.5], [0.0]])
    next_values = jnp.array([[10.0], [0.0]])  # V(final observation) of step 0 = 10
    done = jnp.array([[True], [False]])
    truncated_adv, _ = rollout.gae(rewards, values, next_values, jnp.array([[False], [False]]), done,
                                   0.9, 0.95)
    terminated_adv, _ = rollout.gae(rewards, values, next_values, jnp.array([[True], [False]]), done,
                                    0.9, 0.95)
    assert float(truncated_adv[0, 0]) == pytest.approx(1.0 + 0.9 * 10.0 - 0.5)
    assert float(terminated_adv[0, 0]) == pytest.approx(1.0 - 0.5)


def test_clipped_surrogate_hand_values():
    log_old = jnp.zeros(4)
    ratios = jnp.array([1.5, 0.5, 1.5, 0.5])
    advantages = jnp.array([2.0, 2.0, -2.0, -2.0])
    out = losses.clipped_surrogate(jnp.log(ratios), log_old, advantages, 0.2)
    # A>0: gain capped at 1.2 A; A<0 with r=1.5: unclipped r A = -3 is the min (pessimistic);
    # r=0.5, A>0: r A = 1.0 < 0.8*2; r=0.5, A<0: clipped 0.8*(-2) = -1.6 < -1.0
    np.testing.assert_allclose(out, [2.4, 1.0, -3.0, -1.6], rtol=1e-6)
    frac = losses.clip_fraction(jnp.log(ratios), log_old, 0.2)
    np.testing.assert_array_equal(frac, [1, 1, 1, 1])
    # asymmetric (DAPO clip-higher): upper bound 1 + 0.3
    np.testing.assert_allclose(losses.clipped_surrogate(jnp.log(jnp.array([1.5])), jnp.zeros(1),
                                                        jnp.array([2.0]), 0.2, 0.3), [2.6], rtol=1e-6)


def test_value_loss_clipped_is_pessimistic():
    values, old, returns = jnp.array([2.0]), jnp.array([0.0]), jnp.array([3.0])
    # clipped prediction 0.2 is further from the return than 2.0, so the clipped error counts
    assert float(losses.value_loss(values, old, returns, 0.2)[0]) == pytest.approx(0.5 * 2.8**2)
    assert float(losses.value_loss(values, old, returns)[0]) == pytest.approx(0.5)


def test_approx_kl_and_k3_nonnegative_and_match_closed_form():
    logits_p, logits_q = jnp.array([0.3, -1.0, 2.0]), jnp.array([1.0, 0.0, -0.5])
    p = jax.nn.softmax(logits_p)
    exact = float(jnp.sum(p * (jnp.log(p) - jax.nn.log_softmax(logits_q))))
    actions = jax.random.categorical(jax.random.PRNGKey(1), logits_p, shape=(200_000,))
    log_p = jax.nn.log_softmax(logits_p)[actions]
    log_q = jax.nn.log_softmax(logits_q)[actions]
    k3 = losses.k3_kl(log_p, log_q)
    assert bool(jnp.all(k3 >= 0))
    assert float(k3.mean()) == pytest.approx(exact, rel=0.03)
    # approx_kl(new, old) estimates KL(old || new) under actions from old
    assert float(losses.approx_kl(log_q, log_p).mean()) == pytest.approx(exact, rel=0.03)


def test_categorical_against_numpy():
    dist = Categorical()
    logits = jnp.array([[0.1, 2.0, -1.0], [0.0, 0.0, 0.0]])
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    actions = jnp.array([1, 2])
    np.testing.assert_allclose(dist.log_prob({"logits": logits}, actions),
                               np.log(p[[0, 1], [1, 2]]), rtol=1e-6)
    np.testing.assert_allclose(dist.entropy({"logits": logits}), -(p * np.log(p)).sum(-1), rtol=1e-6)
    q_logits = jnp.array([[1.0, 0.0, 0.0], [2.0, -1.0, 0.5]])
    q = np.exp(q_logits) / np.exp(q_logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(dist.kl({"logits": logits}, {"logits": q_logits}),
                               (p * np.log(p / q)).sum(-1), rtol=1e-5)


def test_diag_gaussian_against_closed_forms():
    dist = DiagGaussian()
    mean, log_std = jnp.array([[0.5, -1.0]]), jnp.array([[0.1, -0.7]])
    action = jnp.array([[0.2, -0.3]])
    std = np.exp(np.asarray(log_std))
    ref_lp = np.sum(-0.5 * ((np.asarray(action) - np.asarray(mean)) / std) ** 2
                    - np.log(std) - 0.5 * np.log(2 * np.pi), -1)
    params = {"mean": mean, "log_std": log_std}
    np.testing.assert_allclose(dist.log_prob(params, action), ref_lp, rtol=1e-6)
    np.testing.assert_allclose(dist.entropy(params), np.sum(0.5 * np.log(2 * np.pi * np.e * std**2), -1),
                               rtol=1e-6)
    other = {"mean": jnp.array([[0.0, 0.0]]), "log_std": jnp.array([[0.0, 0.3]])}
    s2 = np.exp(2 * np.asarray(other["log_std"]))
    ref_kl = np.sum(np.asarray(other["log_std"]) - np.asarray(log_std)
                    + (std**2 + (np.asarray(mean) - np.asarray(other["mean"])) ** 2) / (2 * s2) - 0.5, -1)
    np.testing.assert_allclose(dist.kl(params, other), ref_kl, rtol=1e-5)
    # sampling matches the moments
    samples = dist.sample(jax.random.PRNGKey(0), {"mean": jnp.broadcast_to(mean, (100_000, 2)),
                                                   "log_std": jnp.broadcast_to(log_std, (100_000, 2))})
    np.testing.assert_allclose(samples.mean(0), mean[0], atol=0.02)
    np.testing.assert_allclose(samples.std(0), std[0], rtol=0.02)


@pytest.mark.parametrize("dist_name", ["categorical", "gaussian", "tanh_normal"])
def test_fisher_product_is_hessian_of_kl(dist_name):
    """``fisher_product`` = Hessian of KL(p || q) in q's parameters at q = p, applied to a vector."""
    dist = {"categorical": Categorical, "gaussian": DiagGaussian, "tanh_normal": TanhNormal}[dist_name]()
    if dist_name == "categorical":
        params = {"logits": jnp.array([0.3, -1.2, 0.8, 0.0])}
    elif dist_name == "gaussian":
        params = {"mean": jnp.array([0.4, -0.2]), "log_std": jnp.array([-0.5, 0.3])}
    else:
        params = {"loc": jnp.array([0.4, -0.2]), "raw_scale": jnp.array([-1.5, 0.3])}
    flat, unravel = ravel_pytree(params)
    hessian = jax.hessian(lambda f: dist.kl(params, unravel(f)))(flat)
    vector = jnp.linspace(-1.0, 1.0, flat.size)
    product = ravel_pytree(dist.fisher_product(params, unravel(vector)))[0]
    np.testing.assert_allclose(product, hessian @ vector, rtol=1e-4, atol=1e-6)


def test_obs_norm_matches_numpy_over_batches():
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc=3.0, scale=2.0, size=(50, 3)).astype(np.float32) for _ in range(4)]
    state = envs.obs_norm_init((3,))
    for batch in batches:
        state = envs.obs_norm_update(state, jnp.asarray(batch))
    allx = np.concatenate(batches)
    np.testing.assert_allclose(state.mean, allx.mean(0), rtol=1e-4)
    np.testing.assert_allclose(state.var, allx.var(0), rtol=1e-3)
    normed = envs.obs_norm_apply(state, jnp.asarray(allx))
    np.testing.assert_allclose(normed.mean(0), 0.0, atol=1e-3)
    np.testing.assert_allclose(normed.std(0), 1.0, atol=1e-3)


def test_action_clipping_to_bounds():
    _, _, spec = envs.make("Pendulum-v1")
    clipped = envs.to_env_action(spec, jnp.array([5.0]), clip=True)
    assert float(clipped[0]) == pytest.approx(spec.action_high[0])
    assert float(envs.to_env_action(spec, jnp.array([5.0]), clip=False)[0]) == 5.0
    assert math.isclose(spec.action_high[0], 2.0)


@pytest.mark.parametrize("dist, params, reference", [
    (Categorical(), {"logits": jnp.array([[0.3, -1.2, 2.0], [0.0, 0.0, 0.0]])},
     lambda key, p: jax.random.categorical(key, p["logits"], axis=-1)),
    (DiagGaussian(), {"mean": jnp.array([[0.5, -1.0]]), "log_std": jnp.array([[-0.3, 0.2]])},
     lambda key, p: p["mean"] + jnp.exp(p["log_std"]) * jax.random.normal(key, p["mean"].shape)),
    (TanhNormal(), {"loc": jnp.array([[0.5, -1.0]]), "raw_scale": jnp.array([[-0.3, 0.2]])},
     lambda key, p: jax.random.normal(key, p["loc"].shape) * TanhNormal.scale(p) + p["loc"]),
], ids=["categorical", "diag_gaussian", "tanh_normal"])
def test_noise_drawn_before_a_loop_samples_bitwise_what_jax_samples_in_it(dist, params, reference):
    """The rollout draws every step's noise in one batched call before its loop (``draw``) and samples
    from it in the step (``sample_from``): the actions must be bitwise those of JAX's own sampler called
    inside the loop, with the step's parameters changing from step to step as a policy's do."""
    keys = jax.random.split(jax.random.PRNGKey(3), 64)
    scales = jnp.linspace(0.5, 2.0, 64)

    def step_params(scale):
        return jax.tree_util.tree_map(lambda x: x * scale, params)

    @jax.jit
    def in_loop(keys):
        return jax.lax.scan(lambda c, xs: (c, reference(xs[0], step_params(xs[1]))), 0, (keys, scales))[1]

    @jax.jit
    def drawn_before(keys):
        noise = jax.vmap(lambda k: dist.draw(k, jax.eval_shape(lambda: params)))(keys)
        return jax.lax.scan(lambda c, xs: (c, dist.sample_from(xs[0], step_params(xs[1]))), 0, (noise, scales))[1]

    expected, got = np.asarray(in_loop(keys)), np.asarray(drawn_before(keys))
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    # and sample itself is the same draw
    np.testing.assert_array_equal(np.asarray(jax.jit(dist.sample)(keys[0], params)),
                                  np.asarray(jax.jit(reference)(keys[0], params)))
    if isinstance(dist, Categorical):  # the draws differ between keys: the test sees real noise
        assert len({tuple(r) for r in expected.tolist()}) > 1


@pytest.mark.parametrize("n", [2, 3, 7, 512, 1000, 8192, 8193, 65536, 70000])
def test_permutation_is_bitwise_jax_random_permutation(n):
    """The minibatch shuffle (optim.permutation: single-array integer sorts on CPU) must give exactly
    jax.random.permutation's order, alone and vmapped over keys as lanes run it."""
    from purejaxrl_opt.core.stages.optim import permutation
    keys = jax.random.split(jax.random.PRNGKey(n), 3)
    got = jax.jit(jax.vmap(lambda k: permutation(k, n)))(keys)
    expected = jax.vmap(lambda k: jax.random.permutation(k, n))(keys)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
    np.testing.assert_array_equal(np.sort(np.asarray(got[0])), np.arange(n))


def test_stable_argsort_keeps_the_order_of_equal_keys():
    """Ties (rare among 32-bit random keys, certain here) keep their order, as lax.sort_key_val's does,
    across digits that split the keys at every bit position."""
    from purejaxrl_opt.core.stages.optim import _stable_argsort_u32
    rng = np.random.default_rng(0)
    keys = rng.choice(np.array([0, 1, 2**13, 2**19 + 5, 2**31, 2**32 - 1], np.uint32), 4000)
    got = jax.jit(_stable_argsort_u32, static_argnums=1)(jnp.asarray(keys), 12)
    np.testing.assert_array_equal(np.asarray(got), np.argsort(keys, kind="stable"))
