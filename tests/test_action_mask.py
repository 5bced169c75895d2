"""Action masks: the categorical head over the legal actions only (distributions.mask_logits,
networks.masked), checked against hand computations on the renormalised legal actions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxrl_opt.config.schema import NetworkConfig
from purejaxrl_opt.core.models.distributions import Categorical, mask_logits
from purejaxrl_opt.envs import EnvSpec
from purejaxrl_opt.core.models.networks import Actor
from purejaxrl_opt.core.models.policies import make_policy, replay

LOGITS = np.array([[0.3, -1.2, 2.0, 0.5], [1.0, 1.0, -0.5, 3.0]], np.float32)
MASK = np.array([[1, 0, 1, 1], [0, 1, 1, 0]], np.float32)
LOGITS_Q = np.array([[-0.4, 0.9, 0.1, 1.5], [0.2, -2.0, 0.7, 0.0]], np.float32)


def _legal_probs(logits, mask):
    """The softmax over the legal actions only (numpy, float64); 0 on the illegal ones."""
    out = np.zeros_like(logits, dtype=np.float64)
    for row in range(logits.shape[0]):
        legal = mask[row] > 0
        z = np.exp(logits[row, legal].astype(np.float64) - logits[row, legal].max())
        out[row, legal] = z / z.sum()
    return out


def test_masked_log_prob_entropy_kl_match_the_renormalised_legal_actions():
    dist = Categorical()
    p_params = {"logits": mask_logits(jnp.asarray(LOGITS), jnp.asarray(MASK))}
    q_params = {"logits": mask_logits(jnp.asarray(LOGITS_Q), jnp.asarray(MASK))}
    p, q = _legal_probs(LOGITS, MASK), _legal_probs(LOGITS_Q, MASK)
    actions = np.array([2, 1])
    np.testing.assert_allclose(dist.log_prob(p_params, jnp.asarray(actions)),
                               np.log(p[np.arange(2), actions]), rtol=1e-5)
    entropy = -np.array([sum(pi * np.log(pi) for pi in row if pi > 0) for row in p])
    np.testing.assert_allclose(dist.entropy(p_params), entropy, rtol=1e-5)
    kl = np.array([sum(pi * np.log(pi / qi) for pi, qi in zip(pr, qr) if pi > 0) for pr, qr in zip(p, q)])
    np.testing.assert_allclose(dist.kl(p_params, q_params), kl, rtol=1e-4, atol=1e-7)
    # an illegal action has a finite (very negative) log-prob and the gradients are finite
    assert np.all(np.isfinite(dist.log_prob(p_params, jnp.asarray([1, 0]))))
    grad = jax.grad(lambda l: dist.entropy({"logits": mask_logits(l, jnp.asarray(MASK))}).sum()
                    + dist.kl({"logits": mask_logits(l, jnp.asarray(MASK))}, q_params).sum())(jnp.asarray(LOGITS))
    assert np.all(np.isfinite(grad)) and np.all(np.asarray(grad)[MASK == 0] == 0)


def test_sampling_never_picks_a_masked_action():
    logits = jnp.asarray(np.array([[5.0, -3.0, 0.0, 9.0, 1.0]], np.float32))  # illegal ones preferred
    mask = jnp.asarray(np.array([[0, 1, 1, 0, 1]], np.float32))
    samples = Categorical().sample(jax.random.PRNGKey(0),
                                   {"logits": jnp.broadcast_to(mask_logits(logits, mask), (10_000, 5))})
    counts = np.bincount(np.asarray(samples), minlength=5)
    assert counts[0] == 0 and counts[3] == 0
    p = _legal_probs(np.asarray(logits), np.asarray(mask))[0]
    np.testing.assert_allclose(counts / 10_000, p, atol=0.02)  # ~5 standard errors
    assert int(Categorical().mode({"logits": mask_logits(logits, mask)})[0]) == 4


def test_fisher_product_of_the_masked_distribution_is_the_explicit_matrix():
    """``fisher_product`` at masked logits = ``(diag(p) - p p^T) v`` with ``p`` the renormalised legal
    probabilities: zero rows and columns on the illegal actions."""
    logits = mask_logits(jnp.asarray(LOGITS), jnp.asarray(MASK))
    tangent = np.array([[0.7, -0.3, 1.1, 0.2], [-1.0, 0.4, 0.9, 2.0]], np.float32)
    out = Categorical().fisher_product({"logits": logits}, {"logits": jnp.asarray(tangent)})["logits"]
    p = _legal_probs(LOGITS, MASK)
    for row in range(2):
        fisher = np.diag(p[row]) - np.outer(p[row], p[row])
        np.testing.assert_allclose(out[row], fisher @ tangent[row], rtol=1e-5, atol=1e-7)
    # and it is the Hessian of the KL at q = p, through the masking (the Gauss-Newton form TRPO uses)
    def kl_from(l):
        return Categorical().kl({"logits": jax.lax.stop_gradient(logits)},
                                {"logits": mask_logits(l, jnp.asarray(MASK))}).sum()

    hvp = jax.jvp(jax.grad(kl_from), (jnp.asarray(LOGITS),), (jnp.asarray(tangent),))[1]
    np.testing.assert_allclose(hvp, out, rtol=1e-4, atol=1e-6)


def _spec(num_actions=3, obs_dim=5):
    return EnvSpec("masked-test", (obs_dim + num_actions,), True, num_actions, None, None, 10,
                   action_mask=True)


@pytest.mark.parametrize("recurrent", ["none", "gru"])
def test_actor_reads_the_mask_from_the_last_observation_entries(recurrent):
    spec = _spec()
    net = NetworkConfig(hidden_sizes=(16,), recurrent=recurrent, recurrent_size=8)
    features = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    masks = np.array([[1, 0, 1], [0, 0, 1], [1, 1, 1], [0, 1, 0]], np.float32)
    obs = jnp.asarray(np.concatenate([features, masks], -1))
    policy = make_policy(spec, net) if recurrent != "none" else None
    if policy is None:
        actor = Actor(spec, net)
        params = actor.init(jax.random.PRNGKey(1), obs[:1])
        logits = actor.apply(params, obs)["logits"]
    else:
        params = policy.init(jax.random.PRNGKey(1))
        logits = policy.apply(params, obs)["logits"]
        # the replay (the loss's path) masks too, with the same logits as acting step by step
        _, out, _ = replay(policy.recurrence, params, policy.recurrence.zero((4,)), obs[None],
                           jnp.zeros((1, 4), bool))
        np.testing.assert_allclose(out["logits"][0], logits, rtol=1e-6)
    logits = np.asarray(logits)
    assert np.all(logits[masks == 0] == -1e9) and np.all(logits[masks == 1] > -100)
