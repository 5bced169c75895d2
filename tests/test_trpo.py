"""TRPO: Fisher-vector products vs an explicit Fisher matrix, CG vs numpy, the line search's accept /
reject logic, NaN handling, config validation, and short end-to-end runs."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from purejaxrl_opt.core import algos
from purejaxrl_opt.core.stages import natural_gradient as ng
from purejaxrl_opt.core.algos.base import init_loop, run_updates
from purejaxrl_opt.config.schema import ConfigError, EnvConfig, NetworkConfig, RunConfig, from_dictconfig, hyperparameters
from purejaxrl_opt.core.algos.trpo import TRPOConfig
from purejaxrl_opt.core.models.distributions import Categorical, DiagGaussian
from purejaxrl_opt.envs import EnvSpec
from purejaxrl_opt.core.models.networks import Actor


# --------------------------------------------------------------------------- Fisher-vector products
def _tiny_policy(discrete: bool, seed: int = 0):
    """A small actor at a generic (perturbed) point, on a fixed batch of 7 observations."""
    spec = EnvSpec("tiny", (3,), discrete, 3 if discrete else 2, None, None, 0)
    actor = Actor(spec, NetworkConfig(hidden_sizes=(5,)))
    key_init, key_noise, key_obs = jax.random.split(jax.random.PRNGKey(seed), 3)
    obs = jax.random.normal(key_obs, (7, 3))
    theta, unravel = ravel_pytree(actor.init(key_init, obs[:1]))
    # move away from the init (tiny output layer, log_std = 0) so no structure hides a bug
    theta = theta + 0.5 * jax.random.normal(key_noise, theta.shape)
    dist = Categorical() if discrete else DiagGaussian()
    return (lambda t: actor.apply(unravel(t), obs)), dist, theta


@pytest.mark.parametrize("discrete", [True, False], ids=["categorical", "gaussian"])
@pytest.mark.parametrize("mode", ng.FVP_MODES)
def test_fvp_matches_explicit_fisher(discrete, mode):
    dist_fn, dist, theta = _tiny_policy(discrete)
    fisher = jax.jit(jax.hessian(ng.mean_kl_fn(dist_fn, dist, theta)))(theta)  # [P, P], explicit
    fvp = jax.jit(lambda v: ng.make_fisher_vector_product(dist_fn, dist, theta, mode)(v))
    vs = jax.random.normal(jax.random.PRNGKey(1), (4, theta.size))
    for v in vs:
        expected = fisher @ v
        np.testing.assert_allclose(fvp(v), expected, rtol=1e-4, atol=1e-5 * float(jnp.abs(expected).max()))
    # the full matrix, column by column: symmetric PSD like a Fisher matrix must be
    columns = jax.vmap(fvp)(jnp.eye(theta.size))
    np.testing.assert_allclose(columns, fisher, atol=1e-5 * float(jnp.abs(fisher).max()))
    assert np.linalg.eigvalsh(np.asarray(fisher, np.float64)).min() > -1e-5 * float(jnp.abs(fisher).max())


@pytest.mark.parametrize("discrete", [True, False], ids=["categorical", "gaussian"])
def test_gauss_newton_equals_explicit_jacobian_form(discrete):
    """``F = mean_b J_b^T M_b J_b`` with ``J`` from jax.jacobian and ``M`` written out by hand."""
    dist_fn, dist, theta = _tiny_policy(discrete, seed=3)
    params = dist_fn(theta)
    jac = jax.jacobian(dist_fn)(theta)
    if discrete:
        p = np.asarray(jax.nn.softmax(params["logits"]), np.float64)  # [B, A]
        jb = np.asarray(jac["logits"], np.float64)  # [B, A, P]
        metric = np.stack([np.diag(pb) - np.outer(pb, pb) for pb in p])  # [B, A, A]
        fisher = np.einsum("bap,bac,bcq->pq", jb, metric, jb) / p.shape[0]
    else:
        var = np.exp(2 * np.asarray(params["log_std"], np.float64))  # [B, D]
        jm, js = (np.asarray(jac[k], np.float64) for k in ("mean", "log_std"))
        fisher = (np.einsum("bdp,bd,bdq->pq", jm, 1 / var, jm)
                  + 2 * np.einsum("bdp,bdq->pq", js, js)) / var.shape[0]
    fvp = ng.gauss_newton_fvp(dist_fn, dist, theta)
    v = jax.random.normal(jax.random.PRNGKey(2), theta.shape)
    expected = fisher @ np.asarray(v, np.float64)
    np.testing.assert_allclose(fvp(v), expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


# --------------------------------------------------------------------------- conjugate gradient
def _random_spd(n: int, seed: int, cond: float = 50.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    return (q * np.geomspace(1.0, 1.0 / cond, n)) @ q.T


@pytest.mark.parametrize("damping", [0.0, 0.1])
def test_conjugate_gradient_matches_solve(damping):
    n = 12
    a = _random_spd(n, seed=0)
    b = np.random.default_rng(1).normal(size=n)
    expected = np.linalg.solve(a + damping * np.eye(n), b)
    a32, b32 = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
    x, residual = jax.jit(lambda b: ng.conjugate_gradient(lambda v: a32 @ v, b, 3 * n, damping))(b32)
    np.testing.assert_allclose(x, expected, rtol=2e-3, atol=2e-3 * np.abs(expected).max())
    assert residual < 1e-3 * np.linalg.norm(b)
    # few iterations: not converged, but the reported residual is the true one
    x, residual = ng.conjugate_gradient(lambda v: a32 @ v, b32, 3, damping)
    true_residual = np.linalg.norm(b - (a + damping * np.eye(n)) @ np.asarray(x, np.float64))
    np.testing.assert_allclose(residual, true_residual, rtol=1e-3)
    assert true_residual > 1e-3


def test_conjugate_gradient_breakdown_is_finite():
    b = jnp.ones(4)
    x, _ = ng.conjugate_gradient(lambda v: -v, b, 5)  # negative definite: no progress, no NaN
    assert np.all(np.asarray(x) == 0)
    x, residual = ng.conjugate_gradient(lambda v: v, b.at[0].set(jnp.nan), 5)
    assert np.all(np.asarray(x) == 0) and np.isnan(residual)


# --------------------------------------------------------------------------- line search
THETA_OLD = jnp.array([0.3, -1.2, 0.7], jnp.float32)
GRAD = jnp.array([1.0, 2.0, -0.5], jnp.float32)


def _objective(sign: float = 1.0, kl_scale: float = 1.0):
    """Linear surrogate ``sign * g.d``, quadratic KL ``kl_scale * 0.5 |d|^2`` (``d = theta - old``)."""
    def objective_fn(theta):
        d = theta - THETA_OLD
        return sign * jnp.vdot(GRAD, d), kl_scale * 0.5 * jnp.vdot(d, d)
    return objective_fn


def _line_search(objective_fn, full_step, max_kl=0.01, coeff=0.8, tries=10):
    return jax.jit(lambda s: ng.backtracking_line_search(
        THETA_OLD, s, objective_fn, objective_fn(THETA_OLD)[0], max_kl, coeff, tries))(full_step)


def test_line_search_shrinks_until_kl_is_satisfied():
    max_kl = 0.01
    direction = GRAD / jnp.linalg.norm(GRAD)
    full_step = direction * jnp.sqrt(2 * 4 * max_kl)  # full step: KL = 4 max_kl -> needs alpha^j <= 1/2
    result = _line_search(_objective(), full_step, max_kl)
    assert int(result.index) == 4  # 0.8^3 = 0.512 > 0.5 >= 0.8^4
    np.testing.assert_allclose(result.params, THETA_OLD + 0.8**4 * full_step, rtol=1e-6)
    np.testing.assert_allclose(result.kl, 4 * max_kl * 0.8**8, rtol=1e-5)
    assert 0 < float(result.kl) <= max_kl and float(result.improvement) > 0
    # the full step alone is accepted when it fits
    result = _line_search(_objective(), full_step * 0.4, max_kl)
    assert int(result.index) == 0


@pytest.mark.parametrize("case", ["surrogate_decreases", "kl_always_too_large"])
def test_line_search_rejects_and_returns_old_params_bitwise(case):
    full_step = GRAD * 0.05
    objective_fn = _objective(sign=-1.0) if case == "surrogate_decreases" else _objective(kl_scale=1e9)
    result = _line_search(objective_fn, full_step)
    assert int(result.index) == -1
    assert np.asarray(result.params).tobytes() == np.asarray(THETA_OLD).tobytes()
    assert float(result.kl) == 0 and float(result.improvement) == 0 and float(result.step_size) == 0


def test_trust_region_step_matches_closed_form():
    """Quadratic model, exact CG: full step = sqrt(2 delta / g^T A^-1 g) A^-1 g, accepted at j = 0."""
    a = _random_spd(3, seed=4, cond=5.0)
    a32 = jnp.asarray(a, jnp.float32)

    def objective_fn(theta):
        d = theta - THETA_OLD
        return jnp.vdot(GRAD, d), 0.45 * jnp.vdot(d, a32 @ d)  # 0.9 x the quadratic KL model

    max_kl = 0.02
    theta, info = jax.jit(lambda t: ng.trust_region_step(
        t, objective_fn, lambda v: a32 @ v, max_kl=max_kl, cg_iters=10, cg_damping=0.0,
        backtrack_coeff=0.8, max_backtracks=10))(THETA_OLD)
    x = np.linalg.solve(a, np.asarray(GRAD, np.float64))
    step = np.sqrt(2 * max_kl / (x @ a @ x)) * x
    np.testing.assert_allclose(theta, np.asarray(THETA_OLD) + step, rtol=1e-4, atol=1e-6)
    assert int(info.backtracks) == 0 and int(info.nan_steps) == 0
    np.testing.assert_allclose(info.kl, 0.9 * max_kl, rtol=1e-3)
    np.testing.assert_allclose(info.expected_improvement, np.asarray(GRAD) @ step, rtol=1e-4)
    np.testing.assert_allclose(info.step_norm, np.linalg.norm(step), rtol=1e-4)


def test_step_scale_uses_the_damped_curvature():
    """With damping, CG solves (A + lambda I) x = g; the step is scaled by the curvature of that same
    matrix, full step = sqrt(2 delta / x^T (A + lambda I) x) x (Schulman's reference TRPO), so the
    quadratic KL model of the full step, 0.5 s^2 x^T A x, stays strictly inside delta."""
    a = _random_spd(3, seed=4, cond=5.0)
    a32 = jnp.asarray(a, jnp.float32)
    damping, max_kl = 0.5, 0.02

    def objective_fn(theta):
        d = theta - THETA_OLD
        return jnp.vdot(GRAD, d), 0.5 * jnp.vdot(d, a32 @ d)  # the quadratic KL model itself

    theta, info = jax.jit(lambda t: ng.trust_region_step(
        t, objective_fn, lambda v: a32 @ v, max_kl=max_kl, cg_iters=10, cg_damping=damping,
        backtrack_coeff=0.8, max_backtracks=10))(THETA_OLD)
    damped = a + damping * np.eye(3)
    x = np.linalg.solve(damped, np.asarray(GRAD, np.float64))
    step = np.sqrt(2 * max_kl / (x @ damped @ x)) * x
    undamped_step = np.sqrt(2 * max_kl / (x @ a @ x)) * x
    assert np.linalg.norm(undamped_step - step) > 0.1 * np.linalg.norm(step)  # the two forms differ
    np.testing.assert_allclose(theta, np.asarray(THETA_OLD) + step, rtol=1e-4, atol=1e-6)
    assert int(info.backtracks) == 0 and int(info.nan_steps) == 0
    np.testing.assert_allclose(info.kl, max_kl * (x @ a @ x) / (x @ damped @ x), rtol=1e-3)
    assert float(info.kl) < max_kl


@pytest.mark.parametrize("case", ["nan_fvp", "nan_surrogate", "indefinite_fisher"])
def test_unusable_step_is_rejected_and_counted(case):
    fvp = {"nan_fvp": lambda v: v * jnp.nan, "indefinite_fisher": lambda v: -v}.get(case, lambda v: v)
    objective_fn = _objective()
    if case == "nan_surrogate":
        objective_fn = lambda t: (jnp.nan * _objective()(t)[0], _objective()(t)[1])  # noqa: E731
    theta, info = jax.jit(lambda t: ng.trust_region_step(
        t, objective_fn, fvp, max_kl=0.01, cg_iters=5, cg_damping=0.0, backtrack_coeff=0.8,
        max_backtracks=10))(THETA_OLD)
    assert np.asarray(theta).tobytes() == np.asarray(THETA_OLD).tobytes()
    assert int(info.nan_steps) == 1 and int(info.backtracks) == -1
    for name in ("kl", "surrogate_improvement", "expected_improvement", "step_norm"):
        assert float(getattr(info, name)) == 0, name


# --------------------------------------------------------------------------- configuration
@pytest.mark.parametrize("key,value", [
    ("max_kl", 0.0), ("max_kl", -0.01), ("cg_iters", 0), ("backtrack_coeff", 1.0),
    ("backtrack_coeff", 0.0), ("backtrack_coeff", 1.5), ("max_backtracks", 0), ("cg_damping", -0.1),
    ("fvp", "exact"), ("fvp_subsample", 0.0), ("critic_minibatches", 3)])
def test_bad_config_raises(key, value):
    cfg = {"algo": {"name": "trpo", key: value}, "env": {"id": "CartPole-v1"}}
    with pytest.raises(ConfigError, match=key):
        from_dictconfig(cfg)
    with pytest.raises(ConfigError, match=key):
        RunConfig(algo=TRPOConfig(**{key: value}), env=EnvConfig(id="CartPole-v1")).validate()


# --------------------------------------------------------------------------- end to end
def test_end_to_end_kl_bound_acceptance_learning_and_nan_lane():
    """Four lanes, one compile (max_kl and critic_lr are traced hyperparameters):

    lanes 0, 1: seeds 0, 1 at max_kl 0.02; lane 2: max_kl 0.004; lane 3: critic_lr = NaN, so the
    critic is NaN after update 0 and every later policy step sees NaN advantages. FVPs on the
    default random fifth of the batch (``fvp_subsample``); the KL bound is checked on all of it.

    Learning thresholds calibrated over 24 seeds of this config (keys 1000..1023, one compile of
    these vmapped functions): per seed, accepted fraction 1.0 everywhere (test: > 0.8), late return
    130..500 (test: mean of 2 seeds > 100; worst pair of the 24 seeds 155), late/early 2.7..13.2
    (test: > 2.5 for the 2-seed mean; worst pair 4.2), largest step KL 0.0196..0.0200 (test:
    > 0.006).
    """
    run = RunConfig(algo=TRPOConfig(num_envs=8, num_steps=64, max_kl=0.02),
                    env=EnvConfig(id="CartPole-v1"), total_timesteps=40_960)
    run.validate()
    algo = algos.make_algorithm(run)
    lanes = 4
    hparams = jax.tree_util.tree_map(lambda x: jnp.stack([x] * lanes), hyperparameters(run.algo))
    max_kl = np.array([0.02, 0.02, 0.004, 0.02], np.float32)
    hparams["max_kl"] = jnp.asarray(max_kl)
    hparams["critic_lr"] = hparams["critic_lr"].at[3].set(jnp.nan)
    init = jax.jit(jax.vmap(functools.partial(init_loop, algo)))
    updates = jax.jit(jax.vmap(functools.partial(run_updates, algo), in_axes=(0, None, None)))
    after_first = updates(init(jax.vmap(jax.random.PRNGKey)(jnp.arange(lanes)), hparams), 0, 1)
    final = updates(after_first, 1, algo.num_updates)  # same compiled function, traced bounds
    m = jax.tree_util.tree_map(np.asarray, final.metrics)

    good = slice(0, 3)
    accepted = m["backtracks"][good] >= 0
    assert np.all(m["nan_steps"][good] == 0)
    assert accepted.mean(axis=1).min() > 0.8, accepted.mean(axis=1)
    assert np.all(m["kl"][good][accepted] > 0)
    assert np.all(m["kl"][good] <= max_kl[good, None] * (1 + 1e-3)), m["kl"].max(axis=1)
    assert np.all(m["kl"][good][~accepted] == 0) and np.all(m["step_norm"][good][~accepted] == 0)
    assert np.all(m["surrogate_improvement"][good][accepted] > 0)
    assert m["kl"][:2].max() > 0.004 * 1.5  # the looser lanes really use their larger region
    for name in ng.TrustRegionInfo._fields + ("entropy", "value_loss"):
        assert np.all(np.isfinite(m[name][good])), name
    # learning: the two max_kl=0.02 lanes improve well beyond a random policy (~22)
    early, late = np.nanmean(m["return_mean"][:2, :5]), np.nanmean(m["return_mean"][:2, -5:])
    assert late > 100 and late > 2.5 * early, (early, late)

    # the NaN lane: every step after the first rejected, counted, and the actor really kept, bitwise
    assert m["backtracks"][3, 0] >= 0 and m["nan_steps"][3, 0] == 0
    assert np.all(m["nan_steps"][3, 1:] == 1) and np.all(m["backtracks"][3, 1:] == -1)
    assert np.all(m["kl"][3, 1:] == 0)
    kept = [np.asarray(ravel_pytree(jax.tree_util.tree_map(lambda x: x[3], loop.algo_state.actor_params))[0])
            for loop in (after_first, final)]
    assert np.all(np.isfinite(kept[1])) and kept[0].tobytes() == kept[1].tobytes()


def test_annealed_max_kl_bounds_the_step():
    """``anneal_max_kl``: update i may move the policy by at most max_kl * (1 - i / num_updates)."""
    run = RunConfig(algo=TRPOConfig(num_envs=8, num_steps=64, max_kl=0.02, anneal_max_kl=True),
                    env=EnvConfig(id="CartPole-v1"), total_timesteps=8 * 64 * 10)
    run.validate()
    algo = algos.make_algorithm(run)
    hparams = algo.default_hparams()
    state = jax.jit(algo.init)(jax.random.PRNGKey(0), hparams)
    update = jax.jit(algo.update)
    for update_idx, bound in ((0, 0.02), (9, 0.002)):
        _, metrics = update(state, hparams, jnp.int32(update_idx))
        assert int(metrics["backtracks"]) >= 0
        assert 0.25 * bound < float(metrics["kl"]) <= bound * (1 + 1e-3), (update_idx, metrics["kl"])
