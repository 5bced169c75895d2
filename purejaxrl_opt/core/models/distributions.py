"""Action distributions as pure functions on a parameter pytree.

A policy network outputs *distribution parameters*: ``{"logits": [..., A]}`` (categorical) or
``{"mean": [..., D], "log_std": [..., D]}`` (diagonal Gaussian). Each distribution object below gives
log-probabilities, entropy, KL, sampling and the analytic Fisher information of the distribution with
respect to its own parameters (``fisher_product``), which TRPO's Gauss-Newton Fisher-vector product
needs. Small enough that a dependency (distrax pulls a nightly TFP) is not worth it.
"""

from __future__ import annotations

import math
from typing import Protocol

import jax
import jax.numpy as jnp

DistParams = dict[str, jnp.ndarray]

# the logit of an illegal action: finite, so log-probs, entropy and KL stay finite (its probability
# is exactly 0 in float32: exp(-1e9 - max) underflows), and far below any legal logit
MASKED_LOGIT = -1e9


def mask_logits(logits: jnp.ndarray, action_mask: jnp.ndarray) -> jnp.ndarray:
    """``logits [..., A]`` with the illegal actions (``action_mask [..., A]`` 0; 1 = legal) set to
    :data:`MASKED_LOGIT`: the categorical over the legal actions, renormalised. The masked entries are
    constants, so their gradient (and their share of the Fisher) is zero."""
    return jnp.where(action_mask > 0.5, logits, MASKED_LOGIT)


class Distribution(Protocol):
    def log_prob(self, params: DistParams, action: jnp.ndarray) -> jnp.ndarray: ...
    def entropy(self, params: DistParams) -> jnp.ndarray: ...
    def kl(self, p: DistParams, q: DistParams) -> jnp.ndarray: ...
    def sample(self, key: jax.Array, params: DistParams) -> jnp.ndarray: ...
    def mode(self, params: DistParams) -> jnp.ndarray: ...
    def fisher_product(self, params: DistParams, tangent: DistParams) -> DistParams: ...


class Categorical:
    """Categorical over the last axis of ``logits [..., A]``; actions are int ``[...]``."""

    def log_prob(self, params, action):
        log_p = jax.nn.log_softmax(params["logits"])
        return jnp.take_along_axis(log_p, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self, params):
        log_p = jax.nn.log_softmax(params["logits"])
        return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)

    def kl(self, p, q):
        """KL(p || q) per batch element ``[...]``."""
        log_p, log_q = jax.nn.log_softmax(p["logits"]), jax.nn.log_softmax(q["logits"])
        return jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=-1)

    def sample(self, key, params):
        return jax.random.categorical(key, params["logits"], axis=-1)

    def mode(self, params):
        return jnp.argmax(params["logits"], axis=-1)

    def fisher_product(self, params, tangent):
        """``M v`` with ``M = diag(p) - p p^T``, the Fisher of a categorical in its logits."""
        p = jax.nn.softmax(params["logits"])
        v = tangent["logits"]
        return {"logits": p * v - p * jnp.sum(p * v, axis=-1, keepdims=True)}


class DiagGaussian:
    """Diagonal Gaussian over the last axis; ``mean`` and ``log_std`` are ``[..., D]``."""

    def log_prob(self, params, action):
        mean, log_std = params["mean"], params["log_std"]
        z = (action - mean) * jnp.exp(-log_std)
        return jnp.sum(-0.5 * z**2 - log_std - 0.5 * math.log(2 * math.pi), axis=-1)

    def entropy(self, params):
        return jnp.sum(params["log_std"] + 0.5 * math.log(2 * math.pi * math.e), axis=-1)

    def kl(self, p, q):
        """KL(p || q) per batch element ``[...]``."""
        var_p, var_q = jnp.exp(2 * p["log_std"]), jnp.exp(2 * q["log_std"])
        return jnp.sum(q["log_std"] - p["log_std"] + (var_p + (p["mean"] - q["mean"]) ** 2) / (2 * var_q)
                       - 0.5, axis=-1)

    def sample(self, key, params):
        noise = jax.random.normal(key, params["mean"].shape, params["mean"].dtype)
        return params["mean"] + jnp.exp(params["log_std"]) * noise

    def mode(self, params):
        return params["mean"]

    def fisher_product(self, params, tangent):
        """Fisher in (mean, log_std): ``1/sigma^2`` on the mean, ``2`` on the log-std (diagonal)."""
        return {"mean": tangent["mean"] * jnp.exp(-2 * params["log_std"]),
                "log_std": 2.0 * tangent["log_std"]}


def for_spec(discrete: bool) -> Distribution:
    return Categorical() if discrete else DiagGaussian()
