"""Low-rank adapters (LoRA, Hu et al. 2021) over a causal LM's params dict
(:mod:`purejaxrl_opt.core.models.causal_lm`).

A target is a stacked dense kernel of ``params["layers"]`` (``q k v o gate up down``, each
``[N, in, out]``). Its adapter is ``a [N, in, r]``, ``b [N, r, out]`` and the adapted kernel is
``W + (alpha / r) a @ b``. ``b`` starts at zero (PEFT's initialisation), so the adapted model starts as
the base model exactly; ``a`` is uniform in ``+-1/sqrt(in)`` (PEFT's Kaiming-uniform bound).

The frozen base with its adapters off *is* the reference policy of GRPO's KL term: no second copy of
the weights is kept. :func:`merge` builds the adapted kernels (in the base's dtype) before each forward
pass, so a forward pass holds one transient copy of the targeted kernels and the gradient flows to the
adapters through it; the adapters and their optimizer state are the only trained arrays (float32).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from purejaxrl_opt.config.errors import ConfigError

TARGETS = ("q", "k", "v", "o", "gate", "up", "down")


def check_targets(targets, key: str = "model.lora_targets") -> tuple[str, ...]:
    """``targets`` as a tuple; ConfigError naming ``key`` for an empty list, a duplicate or an unknown
    name."""
    targets = tuple(targets)
    if not targets or len(set(targets)) != len(targets) or any(t not in TARGETS for t in targets):
        raise ConfigError(f"config key '{key}' = {list(targets)} is invalid: must be a non-empty list of "
                          f"distinct names among {list(TARGETS)}")
    return targets


def init(params: dict, targets, rank: int, key: jax.Array) -> dict:
    """Adapters ``{name: {"a": [N, in, r], "b": [N, r, out]}}`` (float32) for the kernels ``targets``
    of ``params["layers"]``."""
    adapters = {}
    for name, target_key in zip(targets, jax.random.split(key, len(targets))):
        layers, fan_in, fan_out = params["layers"][name].shape
        bound = 1.0 / jnp.sqrt(fan_in)
        adapters[name] = {
            "a": jax.random.uniform(target_key, (layers, fan_in, rank), jnp.float32, -bound, bound),
            "b": jnp.zeros((layers, rank, fan_out), jnp.float32)}
    return adapters


def merge(params: dict, adapters: dict, scale: float) -> dict:
    """The adapted params: every kernel with an adapter replaced by ``W + scale * a @ b`` (computed in
    float32, stored in ``W``'s dtype); other leaves are ``params``' own. ``scale = alpha / rank``."""
    layers = dict(params["layers"])
    for name, adapter in adapters.items():
        kernel = layers[name]
        delta = jnp.einsum("nir,nro->nio", adapter["a"], adapter["b"])
        layers[name] = (kernel.astype(jnp.float32) + scale * delta).astype(kernel.dtype)
    return {**params, "layers": layers}
