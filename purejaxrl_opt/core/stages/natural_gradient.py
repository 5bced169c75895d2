"""TRPO's natural-gradient machinery on a flat parameter vector: Fisher-vector products, conjugate
gradient, backtracking line search, and the trust-region step that composes them.

Everything works on ``theta [P]``, the actor's parameters flattened with
``jax.flatten_util.ravel_pytree``; a *distribution function* ``dist_fn(theta) -> dist params`` maps it
to the policy's output distribution on a fixed batch of observations (``{"logits": [B, A]}`` or
``{"mean": [B, D], "log_std": [B, D]}``, see distributions.py). The Fisher matrix ``F [P, P]`` of the
mean KL over that batch is never formed: only products ``F v`` are, and the linear system is solved by
conjugate gradient (no Cholesky/solve: batched LAPACK under ``vmap`` is slow and has hung on CPU).

All functions are traceable, ``vmap``pable, and loop with ``lax.fori_loop`` / ``lax.while_loop``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from purejaxrl_opt.core.models.distributions import DistParams, Distribution

# Fisher-vector product forms (make_fisher_vector_product); TRPOConfig.fvp is checked against them
FVP_MODES: tuple[str, ...] = ("gauss_newton", "hessian")

DistFn = Callable[[jnp.ndarray], DistParams]  # theta [P] -> dist params with batch shape [B]
MatVec = Callable[[jnp.ndarray], jnp.ndarray]  # v [P] -> A v [P]


def _num_samples(dist_params: DistParams) -> int:
    """Batch elements ``B`` of a dist-params dict (every leaf is ``[..., event]``)."""
    leaf = jax.tree_util.tree_leaves(dist_params)[0]
    return max(leaf.size // leaf.shape[-1], 1)


# --------------------------------------------------------------------------- Fisher-vector products
def gauss_newton_fvp(dist_fn: DistFn, dist: Distribution, theta: jnp.ndarray) -> MatVec:
    """``v [P] -> F v [P]`` with ``F = (1/B) sum_b J_b^T M_b J_b`` at ``theta``.

    ``J_b`` is the Jacobian of sample ``b``'s distribution parameters w.r.t. ``theta`` and ``M_b`` the
    analytic Fisher of the output distribution in its own parameters (``dist.fisher_product``). ``J v``
    is a forward-mode product and ``J^T u`` its transpose (the vjp); the network is linearised once
    here, so each product inside conjugate gradient costs one linear forward and one linear backward
    pass, with no re-evaluation of the nonlinear network.
    """
    dist_params, jvp_fn = jax.linearize(dist_fn, theta)  # jvp_fn: v [P] -> J v (dist-params pytree)
    vjp_fn = jax.linear_transpose(jvp_fn, theta)  # u (dist-params pytree) -> (J^T u,)
    inv_batch = 1.0 / _num_samples(dist_params)

    def matvec(v: jnp.ndarray) -> jnp.ndarray:
        metric_jv = dist.fisher_product(dist_params, jvp_fn(v))
        return vjp_fn(metric_jv)[0] * inv_batch

    return matvec


def mean_kl_fn(dist_fn: DistFn, dist: Distribution, theta_old: jnp.ndarray
               ) -> Callable[[jnp.ndarray], jnp.ndarray]:
    """``theta [P] -> mean_b KL(pi_old(.|s_b) || pi_theta(.|s_b))`` (scalar), ``pi_old`` frozen."""
    old = jax.lax.stop_gradient(dist_fn(theta_old))
    return lambda theta: jnp.mean(dist.kl(old, dist_fn(theta)))


def kl_hessian_fvp(dist_fn: DistFn, dist: Distribution, theta: jnp.ndarray) -> MatVec:
    """``v [P] -> H v [P]``, ``H`` the Hessian of the mean KL at ``theta`` (forward-over-reverse).

    At ``theta = theta_old`` this equals the Gauss-Newton product exactly (the KL's gradient w.r.t.
    the distribution parameters vanishes there); it differentiates the network twice, so it is slower.
    """
    _, hvp = jax.linearize(jax.grad(mean_kl_fn(dist_fn, dist, theta)), theta)
    return hvp


def make_fisher_vector_product(dist_fn: DistFn, dist: Distribution, theta: jnp.ndarray,
                               mode: str = "gauss_newton") -> MatVec:
    """The Fisher-vector product at ``theta`` by ``mode``: ``"gauss_newton"`` or ``"hessian"``."""
    if mode == "gauss_newton":
        return gauss_newton_fvp(dist_fn, dist, theta)
    if mode == "hessian":
        return kl_hessian_fvp(dist_fn, dist, theta)
    raise ValueError(f"unknown Fisher-vector product mode {mode!r}; choose one of {FVP_MODES}")


# --------------------------------------------------------------------------- conjugate gradient
def conjugate_gradient(matvec: MatVec, b: jnp.ndarray, iters: int, damping=0.0,
                       rel_tol: float = 1e-10) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Solve ``(A + damping I) x = b`` for symmetric PSD ``A`` given by ``matvec``; ``b [P]``.

    Runs ``iters`` (static) iterations from ``x = 0`` in a ``fori_loop``; an iteration is frozen (x
    unchanged) once ``|r|^2 <= rel_tol |b|^2`` or when the curvature ``p^T A p`` is not positive and
    finite, so a breakdown leaves the last good iterate rather than NaN (a NaN ``b`` gives ``x = 0``).
    Returns ``(x [P], |r|)``, ``r = b - (A + damping I) x`` as tracked by the recurrence.
    """
    def damped(v):
        return matvec(v) + damping * v

    b_sq = jnp.vdot(b, b)

    def _iteration(_, carry):
        x, r, p, r_sq = carry
        ap = damped(p)
        curvature = jnp.vdot(p, ap)
        active = (r_sq > rel_tol * b_sq) & (curvature > 0) & jnp.isfinite(curvature)
        alpha = jnp.where(active, r_sq / jnp.where(active, curvature, 1.0), 0.0)
        x = jnp.where(active, x + alpha * p, x)  # where, not alpha = 0: 0 * NaN is NaN
        r = jnp.where(active, r - alpha * ap, r)
        r_sq_new = jnp.vdot(r, r)
        beta = jnp.where(active, r_sq_new / jnp.where(active, r_sq, 1.0), 0.0)
        p = jnp.where(active, r + beta * p, p)
        return x, r, p, jnp.where(active, r_sq_new, r_sq)

    x, _, _, r_sq = jax.lax.fori_loop(0, iters, _iteration, (jnp.zeros_like(b), b, b, b_sq))
    return x, jnp.sqrt(r_sq)


# --------------------------------------------------------------------------- line search
class LineSearchResult(NamedTuple):
    params: jnp.ndarray  # [P] accepted params, or exactly the old ones when rejected
    index: jnp.ndarray  # int32: accepted j (step alpha^j), -1 when every candidate was rejected
    step_size: jnp.ndarray  # alpha^j of the accepted step, 0 when rejected
    kl: jnp.ndarray  # mean KL at the accepted params, 0 when rejected
    improvement: jnp.ndarray  # L(accepted) - L(old), 0 when rejected


def backtracking_line_search(theta_old: jnp.ndarray, full_step: jnp.ndarray,
                             objective_fn: Callable[[jnp.ndarray], tuple[jnp.ndarray, jnp.ndarray]],
                             surrogate_old, max_kl, backtrack_coeff, max_backtracks: int,
                             enabled=True) -> LineSearchResult:
    """Try ``theta_old + alpha^j full_step`` for ``j = 0 .. max_backtracks-1`` (``lax.while_loop``).

    ``objective_fn(theta) -> (L(theta), mean KL(pi_old || pi_theta))``. The first candidate with a
    finite KL ``<= max_kl`` and a finite improvement ``L - surrogate_old > 0`` is accepted. If none is
    (or ``enabled`` is false: nothing is tried), ``theta_old`` itself is returned — bit for bit — with
    index -1. ``theta_old, full_step: [P]``; ``max_kl``, ``backtrack_coeff`` may be traced scalars.
    """
    def _cond(carry):
        j, accepted = carry[0], carry[1]
        return enabled & jnp.logical_not(accepted) & (j < max_backtracks)

    def _try(carry):
        j = carry[0]
        step_size = jnp.power(jnp.asarray(backtrack_coeff, theta_old.dtype), j)
        candidate = theta_old + step_size * full_step
        surrogate, kl = objective_fn(candidate)
        improvement = surrogate - surrogate_old
        accepted = (jnp.isfinite(kl) & jnp.isfinite(improvement) & (kl <= max_kl)
                    & (improvement > 0))
        return j + 1, accepted, candidate, step_size, kl, improvement

    zero = jnp.zeros((), theta_old.dtype)
    init = (jnp.zeros((), jnp.int32), jnp.zeros((), bool), theta_old, zero, zero, zero)
    j, accepted, candidate, step_size, kl, improvement = jax.lax.while_loop(_cond, _try, init)
    return LineSearchResult(
        params=jnp.where(accepted, candidate, theta_old),
        index=jnp.where(accepted, j - 1, -1).astype(jnp.int32),
        step_size=jnp.where(accepted, step_size, zero),
        kl=jnp.where(accepted, kl, zero),
        improvement=jnp.where(accepted, improvement, zero))


# --------------------------------------------------------------------------- the TRPO step
class TrustRegionInfo(NamedTuple):
    """Diagnostics of one trust-region step (scalars); the metric names of ``algos/trpo.py``."""

    kl: jnp.ndarray  # mean KL(pi_old || pi_new) after the accepted step, 0 if rejected
    surrogate_improvement: jnp.ndarray  # L(new) - L(old) of the accepted step, 0 if rejected
    expected_improvement: jnp.ndarray  # first-order prediction g . (new - old), 0 if rejected
    backtracks: jnp.ndarray  # accepted index j, -1 if rejected
    cg_residual: jnp.ndarray  # |g - (F + damping I) x| at the end of conjugate gradient
    step_norm: jnp.ndarray  # |new - old|, 0 if rejected
    nan_steps: jnp.ndarray  # 1 if the proposed step was unusable (NaN/inf, x^T F x <= 0), else 0


def trust_region_step(theta_old: jnp.ndarray,
                      objective_fn: Callable[[jnp.ndarray], tuple[jnp.ndarray, jnp.ndarray]],
                      fvp: MatVec, *, max_kl, cg_iters: int, cg_damping, backtrack_coeff,
                      max_backtracks: int, mean_fn: Callable | None = None
                      ) -> tuple[jnp.ndarray, TrustRegionInfo]:
    """One TRPO policy step from ``theta_old [P]``; returns ``(theta_new [P], info)``.

    ``objective_fn(theta) -> (L(theta), mean KL(pi_old || pi_theta))`` on the batch, ``fvp`` the
    Fisher-vector product at ``theta_old``. Solves ``(F + damping I) x = g`` (``g = grad L``) by CG,
    scales it to the trust-region boundary of the quadratic KL model,
    ``full_step = sqrt(2 max_kl / x^T (F + damping I) x) x``, and backtracks. A step whose curvature is not a
    positive finite number (or whose ``x`` or ``L(theta_old)`` is not finite) is rejected before the
    line search and counted in ``nan_steps``: the parameters are then returned unchanged.

    ``mean_fn`` (default None: identity, numbers unchanged) reduces batch means over a data-parallel
    axis (e.g. ``lambda x: lax.pmean(x, "data")`` on a pytree): ``objective_fn`` and ``fvp`` are then
    the device's local means, and the gradient, every Fisher-vector product and every line-search
    evaluation are averaged, so all devices take the same step and decisions.
    """
    if mean_fn is not None:
        local_objective, local_fvp = objective_fn, fvp
        objective_fn = lambda theta: mean_fn(local_objective(theta))  # noqa: E731
        fvp = lambda v: mean_fn(local_fvp(v))  # noqa: E731
        surrogate_old, grad = mean_fn(
            jax.value_and_grad(lambda theta: local_objective(theta)[0])(theta_old))
    else:
        surrogate_old, grad = jax.value_and_grad(lambda theta: objective_fn(theta)[0])(theta_old)
    direction, cg_residual = conjugate_gradient(fvp, grad, cg_iters, cg_damping)
    # the curvature of the matrix CG solved with, x^T (F + damping I) x (Schulman's reference TRPO):
    # the full step then lies inside the quadratic KL model's boundary rather than on it
    curvature = jnp.vdot(direction, fvp(direction) + cg_damping * direction)
    valid = (jnp.isfinite(curvature) & (curvature > 0) & jnp.all(jnp.isfinite(direction))
             & jnp.isfinite(surrogate_old))
    scale = jnp.sqrt(2.0 * max_kl / jnp.where(valid, curvature, 1.0))
    full_step = jnp.where(valid, scale * direction, 0.0)
    search = backtracking_line_search(theta_old, full_step, objective_fn, surrogate_old, max_kl,
                                      backtrack_coeff, max_backtracks, enabled=valid)
    accepted = search.index >= 0
    info = TrustRegionInfo(
        kl=search.kl,
        surrogate_improvement=search.improvement,
        # where, not a product with step_size = 0: a NaN gradient must not leak into the metric
        expected_improvement=jnp.where(accepted, search.step_size * jnp.vdot(grad, full_step), 0.0),
        backtracks=search.index,
        cg_residual=cg_residual,
        step_norm=search.step_size * jnp.linalg.norm(full_step),
        nan_steps=jnp.logical_not(valid).astype(jnp.int32))
    return search.params, info
