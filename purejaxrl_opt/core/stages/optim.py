"""Optimisers and schedules shared by the algorithms (a shared stage: no algorithm owns them)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax


def adam(hparams, learning_rate, max_grad_norm=None, eps: float = 1e-5) -> optax.GradientTransformation:
    """Adam with global-norm clipping (``max_grad_norm``, default ``hparams["max_grad_norm"]``); the
    rate is applied outside Adam's own state so it can be annealed or traced (a swept lane value).
    ``eps`` is added to the root of the second moment (PureJaxRL's 1e-5; optax's and Brax's 1e-8)."""
    max_grad_norm = hparams["max_grad_norm"] if max_grad_norm is None else max_grad_norm
    return optax.chain(optax.clip_by_global_norm(max_grad_norm),
                       optax.scale_by_adam(eps=eps), optax.scale(-learning_rate))


def adamw(learning_rate, max_grad_norm, weight_decay=0.0, b2=0.999, eps=1e-8) -> optax.GradientTransformation:
    """AdamW (decoupled weight decay, Loshchilov & Hutter 2019) with global-norm clipping; as in
    :func:`adam`, the (traced) rate is applied outside Adam's state. The language-model trainer's
    optimiser (eps 1e-8 and beta2 as in TRL / PyTorch)."""
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.scale_by_adam(b2=b2, eps=eps),
                       optax.add_decayed_weights(weight_decay), optax.scale(-learning_rate))


def annealed(lr, update_idx, num_updates: int, anneal: bool):
    """``lr`` decayed linearly to 0 over ``num_updates`` when ``anneal`` (else ``lr``)."""
    return lr * (1.0 - update_idx / num_updates) if anneal else lr


def _stable_argsort_u32(keys: jax.Array, index_bits: int) -> jax.Array:
    """The stable ascending argsort of uint32 ``keys`` (``[n]``, ``n <= 2**index_bits``): least-significant
    digit first, each pass one sort of a single uint32 array holding ``digit << index_bits | position``,
    so ties keep their order and the result is ``lax.sort_key_val(keys, iota)``'s exactly."""
    n = keys.shape[-1]
    iota = jnp.arange(n, dtype=jnp.uint32)
    digit_bits, index_mask = 32 - index_bits, jnp.uint32((1 << index_bits) - 1)
    perm, shift = None, 0
    while shift < 32:
        width = min(digit_bits, 32 - shift)
        digit = (keys >> shift) & jnp.uint32((1 << width) - 1)
        if perm is not None:
            digit = digit[perm]
        step = (jnp.sort((digit << index_bits) | iota) & index_mask).astype(jnp.int32)
        perm = step if perm is None else perm[step]
        shift += width
    return perm


def permutation(key: jax.Array, n: int) -> jax.Array:
    """``jax.random.permutation(key, n)``, bitwise the same, 2.0-2.65x faster on XLA:CPU at 512-65,536 items
    (experiments/bench_shuffle.py).

    jax shuffles with rounds of ``lax.sort_key_val`` on fresh 32-bit keys; XLA:CPU sorts a single integer
    array about 3.5x faster than a key-value pair (its comparator is then native), so each round here is
    the same stable sort done as two or three single-array sorts (:func:`_stable_argsort_u32`). Other
    backends, and ``n`` above 2**24 (digits too narrow to gain), call jax's own."""
    index_bits = max(1, (n - 1).bit_length())
    if n < 2 or index_bits > 24 or jax.default_backend() != "cpu":
        return jax.random.permutation(key, n)
    # jax.random._shuffle's number of rounds, so that the keys drawn are the same
    rounds = int(np.ceil(3 * np.log(n) / np.log(np.iinfo(np.uint32).max)))
    order = jnp.arange(n)
    for _ in range(rounds):
        key, subkey = jax.random.split(key)
        order = order[_stable_argsort_u32(jax.random.bits(subkey, (n,), jnp.uint32), index_bits)]
    return order


def minibatch_epochs(grad_fn, optimizer, flat_params, opt_state, batch, num_items: int,
                     num_minibatches: int, epoch_keys: jax.Array, reduce_grads=lambda g: g,
                     shuffle_key=lambda k: k, loss_keys: bool = False):
    """``len(epoch_keys)`` epochs of Adam steps over ``num_minibatches`` minibatches of ``batch``.

    ``flat_params``: a flat vector, or any pytree of arrays (optax.apply_updates keeps each leaf's dtype).
    ``batch``: a pytree of ``[num_items, ...]`` leaves (samples, or whole episodes); every epoch
    shuffles it with one gather and cuts it into contiguous minibatches. ``grad_fn(flat_params, mb)
    -> (grads, diagnostics)`` on flat parameters; ``reduce_grads`` (data parallel: a ``pmean``) and
    ``shuffle_key`` (per-device keys) default to the identity. ``loss_keys``: ``grad_fn(flat_params,
    mb, key)`` gets a fresh key per minibatch (a sampled loss term, e.g. a tanh-normal's entropy
    estimate), drawn from ``fold_in(epoch_key, 1)`` so the shuffles stay those of ``loss_keys=False``.
    Returns ``(flat_params, opt_state, diagnostics [epochs, minibatches])``.
    """

    def _update_minibatch(train, inputs):
        flat_params, opt_state = train
        grads, diagnostics = grad_fn(flat_params, *inputs) if loss_keys else grad_fn(flat_params, inputs)
        updates, opt_state = optimizer.update(reduce_grads(grads), opt_state, flat_params)
        return (optax.apply_updates(flat_params, updates), opt_state), diagnostics

    def _update_epoch(train, epoch_key):
        order = permutation(shuffle_key(epoch_key), num_items)
        shuffled = jax.tree_util.tree_map(
            lambda x: x[order].reshape((num_minibatches, -1) + x.shape[1:]), batch)
        if loss_keys:
            keys = jax.random.split(shuffle_key(jax.random.fold_in(epoch_key, 1)), num_minibatches)
            return jax.lax.scan(_update_minibatch, train, (shuffled, keys))
        return jax.lax.scan(_update_minibatch, train, shuffled)

    (flat_params, opt_state), diagnostics = jax.lax.scan(_update_epoch, (flat_params, opt_state),
                                                         epoch_keys)
    return flat_params, opt_state, diagnostics
