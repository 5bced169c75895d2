"""CausalTransformer: causality, cached decoding == full re-encoding, jit/vmap/grad, pos clamping.

Test data is built with numpy and every model call is jitted once: eager jax compiles each primitive
per shape, which dominates the run time on a small CPU.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxrl_opt.core.models.transformer as tr
from purejaxrl_opt.core.models.transformer import (CausalTransformer, KVCache, decode, init_cache, init_params,
                                       prefill)

VOCAB, OUT, MAX_LEN = 11, 7, 12
LAYERS, HEADS, D_MODEL = 2, 4, 32


def _model(**kw) -> CausalTransformer:
    return CausalTransformer(vocab_size=VOCAB, num_outputs=OUT, max_len=MAX_LEN, d_model=D_MODEL,
                             num_layers=LAYERS, num_heads=HEADS, **kw)


@partial(jax.jit, static_argnums=0)
def _sharp_params(model, key):
    """Parameters with O(1) weights: sharp attention and O(1) outputs, so mistakes are visible at
    atol 1e-5 (the default init gives near-uniform attention and ~0.01 outputs)."""
    params = init_params(model, key)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.fold_in(key, 1), len(leaves))
    new = [leaf + jax.random.normal(k, leaf.shape) * (0.5 if leaf.ndim == 1 else 0.7 / np.sqrt(
        leaf.shape[0])) for leaf, k in zip(leaves, keys)]
    return jax.tree_util.tree_unflatten(treedef, new)


class Jitted:
    """The model's entry points, each jitted once."""

    def __init__(self, model):
        self.model = model
        self.apply = jax.jit(model.apply)
        self.prefill = jax.jit(partial(prefill, model))
        self.decode = jax.jit(partial(decode, model))


@pytest.fixture(scope="module")
def setup():
    model = _model()
    return Jitted(model), _sharp_params(model, jax.random.PRNGKey(0))


def _tokens(seed, shape):
    return np.random.default_rng(seed).integers(1, VOCAB, shape).astype(np.int32)


def _right_pad(tokens, length):
    return np.where(np.arange(tokens.shape[-1])[None] < np.asarray(length)[:, None], tokens, 0)


def test_output_shapes_and_scale(setup):
    m, params = setup
    out = m.apply(params, _tokens(1, (2, 3, 5)))  # any leading batch dims, L < max_len
    assert out.shape == (2, 3, 5, OUT)
    assert float(np.std(out)) > 0.1  # the sharp params really give O(1) outputs
    # the default init: small head -> near-zero outputs (near-uniform policy)
    small = _model()
    params0 = jax.jit(partial(init_params, small))(jax.random.PRNGKey(0))
    out0 = np.asarray(jax.jit(small.apply)(params0, _tokens(1, (4, MAX_LEN))))
    assert 0.0 < float(np.std(out0)) < 0.05
    with pytest.raises(ValueError, match="max_len"):
        m.apply(params, _tokens(1, (1, MAX_LEN + 1)))


def test_causality(setup):
    m, params = setup
    tokens = _tokens(2, (4, MAX_LEN))
    base = np.asarray(m.apply(params, tokens))
    for p in (0, 3, MAX_LEN - 2):
        # change every later token (to other tokens, and to padding): nothing at <= p may move
        for later in (_tokens(10 + p, (4, MAX_LEN - p - 1)), np.zeros((4, MAX_LEN - p - 1))):
            changed = tokens.copy()
            changed[:, p + 1:] = later
            out = np.asarray(m.apply(params, changed))
            np.testing.assert_array_equal(out[:, :p + 1], base[:, :p + 1])
            assert np.abs(out[:, p + 1:] - base[:, p + 1:]).max() > 1e-3


def test_causality_check_detects_a_leak(setup):
    """The causality check is meaningful: without the causal mask a later token moves position 0."""
    m, params = setup
    tokens = _tokens(2, (2, MAX_LEN))
    changed = tokens.copy()
    changed[:, -1] = changed[:, -1] % (VOCAB - 1) + 1
    orig = tr._attention
    try:
        tr._attention = lambda q, k, v, mask: orig(q, k, v, jnp.ones_like(mask))
        leaky = jax.jit(lambda p, t: m.model.apply(p, t))  # own trace, made without the mask
        a, b = np.asarray(leaky(params, tokens)), np.asarray(leaky(params, changed))
    finally:
        tr._attention = orig
    assert np.abs(a[:, 0] - b[:, 0]).max() > 1e-4


def test_prefill_matches_full_forward(setup):
    m, params = setup
    length = np.array([1, 2, 5, 9, MAX_LEN])
    tokens = _right_pad(_tokens(3, (5, MAX_LEN)), length)  # right-padded prompt buffer
    rows = np.arange(5)
    out, cache = m.prefill(params, tokens, length)
    full = np.asarray(m.apply(params, tokens))
    np.testing.assert_allclose(out, full[rows, length - 1], atol=1e-5, rtol=0)
    assert isinstance(cache, KVCache)
    assert cache.k.shape == cache.v.shape == (LAYERS, 5, MAX_LEN, HEADS, D_MODEL // HEADS)
    assert cache.k.dtype == jnp.float32
    # a prompt buffer shorter than max_len is accepted; the cache is still max_len long
    short = np.minimum(length, 9)
    out_s, cache_s = m.prefill(params, tokens[:, :9], short)
    np.testing.assert_allclose(out_s, full[rows, short - 1], atol=1e-5, rtol=0)
    assert cache_s.k.shape == cache.k.shape


def test_cached_decode_matches_full_reencode(setup):
    m, params = setup
    batch = 4
    seq = _tokens(4, (batch, MAX_LEN))
    length = np.array([1, 3, 6, 8])  # different prompt length per row
    full = np.asarray(m.apply(params, seq))  # reference: the whole final sequence at once
    rows = np.arange(batch)

    out, cache = m.prefill(params, _right_pad(seq, length), length)
    np.testing.assert_allclose(out, full[rows, length - 1], atol=1e-5, rtol=0)
    # the cache beyond each prompt may hold anything: fill it with large garbage
    beyond = (np.arange(MAX_LEN)[None, :] >= length[:, None])[None, :, :, None, None]
    noise = np.random.default_rng(5).normal(size=cache.k.shape).astype(np.float32) * 50.0
    cache = KVCache(np.where(beyond, noise, cache.k), np.where(beyond, -noise, cache.v))

    checked = 0
    for t in range(MAX_LEN - int(length.min())):
        pos = length + t  # rows past the end keep being stepped (pos clamped, output ignored)
        valid = pos < MAX_LEN
        at = np.minimum(pos, MAX_LEN - 1)
        out, cache = m.decode(params, seq[rows, at], pos, cache)
        out = np.asarray(out)
        assert np.all(np.isfinite(out))
        np.testing.assert_allclose(out[valid], full[rows, at][valid], atol=1e-5, rtol=0)
        checked += int(valid.sum())
    assert checked == int((MAX_LEN - length).sum())


def test_decode_in_scan_matches_full(setup):
    """Cache as a lax.scan carry (the rollout use): generate greedily, compare with re-encoding."""
    m, params = setup
    model = m.model
    batch, p0, steps = 3, 4, 6
    seq0 = np.zeros((batch, MAX_LEN), np.int32)
    seq0[:, :p0] = _tokens(6, (batch, p0))
    length = np.full((batch,), p0)

    @jax.jit
    def cached(params):
        out, cache = prefill(model, params, seq0, length)

        def body(carry, _):
            out, cache, pos = carry
            tok = jnp.argmax(out[:, 1:], -1) + 1  # never the padding id
            nxt, cache = decode(model, params, tok, pos, cache)
            return (nxt, cache, pos + 1), (tok, out)

        _, (toks, outs) = jax.lax.scan(body, (out, cache, jnp.asarray(length)), None, length=steps)
        return toks.T, outs.swapaxes(0, 1)

    toks, outs = cached(params)
    seq = seq0.copy()
    seq[:, p0:p0 + steps] = np.asarray(toks)
    full = np.asarray(m.apply(params, seq))
    np.testing.assert_allclose(outs, full[:, p0 - 1:p0 - 1 + steps], atol=1e-5, rtol=0)


# the transformer policy is jitted, vmapped and differentiated in the fast tier by the token RL
# tests
@pytest.mark.slow
def test_jit_vmap_and_grad():
    model = _model()
    keys = jax.random.split(jax.random.PRNGKey(7), 2)
    params2 = jax.jit(jax.vmap(partial(init_params, model)))(keys)  # two parameter sets
    tokens = _tokens(8, (3, MAX_LEN))
    out2 = np.asarray(jax.jit(jax.vmap(model.apply, in_axes=(0, None)))(params2, tokens))
    assert out2.shape == (2, 3, MAX_LEN, OUT)
    apply = jax.jit(model.apply)
    for i in range(2):
        p_i = jax.tree_util.tree_map(lambda x: x[i], params2)
        np.testing.assert_allclose(out2[i], apply(p_i, tokens), atol=1e-6, rtol=1e-5)
    assert np.abs(out2[0] - out2[1]).max() > 0

    # vmapped prefill + decode over the parameter sets
    length = np.array([2, 5, 7])
    rows = np.arange(3)

    @jax.jit
    @jax.vmap
    def prefill_decode(p):
        _, cache = prefill(model, p, _right_pad(tokens, length), length)
        return cache, decode(model, p, tokens[rows, length], length, cache)[0]

    cache2, out_d = prefill_decode(params2)
    assert cache2.k.shape == (2, LAYERS, 3, MAX_LEN, HEADS, D_MODEL // HEADS)
    np.testing.assert_allclose(out_d, out2[:, rows, length], atol=1e-6, rtol=1e-5)

    def loss(p):
        return jnp.mean(jax.nn.log_softmax(model.apply(p, tokens))[..., 0])

    grads = jax.jit(jax.grad(loss))(jax.tree_util.tree_map(lambda x: x[0], params2))
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.all(np.isfinite(g)), path
    # the signal reaches the bottom of the network, not just the head
    for name in ("head", "qkv_0", "mlp_in_0"):
        assert np.abs(grads["params"][name]["kernel"]).max() > 0, name
    assert np.abs(grads["params"]["tok_embed"]["embedding"]).max() > 0
    assert np.abs(grads["params"]["pos_embed"]).max() > 0


def test_decode_past_max_len_is_finite(setup):
    m, params = setup
    batch = 3
    tokens = _tokens(9, (batch, MAX_LEN))
    _, cache = m.prefill(params, tokens, np.full((batch,), MAX_LEN))
    for pos in (MAX_LEN, MAX_LEN + 5, 10 * MAX_LEN):
        out, cache = m.decode(params, tokens[:, 0], np.full((batch,), pos), cache)
        assert out.shape == (batch, OUT)
        assert np.all(np.isfinite(out))
        assert np.all(np.isfinite(cache.k)) and np.all(np.isfinite(cache.v))
    # an empty (all-zero) cache also decodes finitely
    out, _ = m.decode(params, tokens[:, 0], np.zeros((batch,), np.int32),
                      init_cache(m.model, batch))
    assert np.all(np.isfinite(out))


def test_masked_softmax_fully_masked_row_is_finite():
    rng = np.random.default_rng(0)
    q, k = (rng.normal(size=s).astype(np.float32) * 100 for s in ((2, 3, 4, 8), (2, 5, 4, 8)))
    v = rng.normal(size=(2, 5, 4, 8)).astype(np.float32)
    mask = np.zeros((2, 3, 5), bool)
    mask[:, 1:, :2] = True  # query 0 may attend to nothing
    out, g = jax.jit(jax.value_and_grad(lambda q: tr._attention(q, k, v, mask).sum()))(q)
    assert np.isfinite(out) and np.all(np.isfinite(g))
