"""Token generation with the CausalTransformer: cached decoding vs. full re-encoding.

For each case (batch B, prompt length P, T new tokens, buffer max_len) it generates T greedy tokens
(argmax over ids 1.., never the padding id) two ways, both a single jitted function:
  (a) cached: one ``prefill`` of the prompt, then T-1 ``decode`` steps in a ``lax.scan`` with the
      KV cache as carry (O(max_len) attention and O(1) MLP work per token);
  (b) re-encode: T full causal forwards of the whole ``[B, max_len]`` buffer in a ``lax.scan``,
      taking the output at the last filled position (O(max_len) MLP work per token).
Compile time is excluded (one warm-up call); each timing is the median of ``--repeats`` calls with
``block_until_ready``, the two methods taking turns (fair under load from other processes). It
prints generated tokens/s (B*T per call) for both, the speed-up (a)/(b) and the fraction of
identical generated tokens (a check: both compute the same outputs), and writes JSON.

    python experiments/bench_decode.py                      # the two default cases
    python experiments/bench_decode.py --case 512 6 4 10    # B P T max_len (repeatable)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from purejaxrl_opt.core.models.transformer import CausalTransformer, decode, init_params, prefill

DEFAULT_CASES = [(512, 6, 4, 10), (512, 16, 16, 32)]


def _time_interleaved(fns: dict, repeats: int) -> dict:
    """Median wall seconds of each ``fn()`` (which must block) over ``repeats`` calls, after a
    warm-up. The functions take turns within each repeat, so load from other processes on a shared
    machine hits both alike and their ratio stays meaningful."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _greedy(out):
    return jnp.argmax(out[:, 1:], axis=-1).astype(jnp.int32) + 1


def bench_case(batch: int, prompt_len: int, new_tokens: int, max_len: int, args) -> dict:
    if prompt_len + new_tokens - 1 > max_len:
        raise ValueError("prompt_len + new_tokens - 1 must be <= max_len")
    model = CausalTransformer(vocab_size=args.vocab, num_outputs=args.vocab, max_len=max_len,
                              d_model=args.d_model, num_layers=args.num_layers,
                              num_heads=args.num_heads, head_init_scale=1.0)
    params = jax.jit(lambda k: init_params(model, k))(jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    buf = np.zeros((batch, max_len), np.int32)
    buf[:, :prompt_len] = rng.integers(1, args.vocab, (batch, prompt_len))
    buf = jnp.asarray(buf)
    length = jnp.full((batch,), prompt_len, jnp.int32)
    rows = jnp.arange(batch)

    @jax.jit
    def cached(params, buf, length):
        out, cache = prefill(model, params, buf, length)

        def body(carry, _):
            out, cache, pos = carry
            tok = _greedy(out)
            out, cache = decode(model, params, tok, pos, cache)
            return (out, cache, pos + 1), tok

        (out, _, _), toks = jax.lax.scan(body, (out, cache, length), None, length=new_tokens - 1)
        return jnp.concatenate([toks, _greedy(out)[None]], axis=0).T  # [B, T]

    @jax.jit
    def reencode(params, buf, length):
        def body(carry, _):
            buf, pos = carry
            out = model.apply(params, buf)[rows, pos - 1]
            tok = _greedy(out)
            buf = buf.at[rows, jnp.minimum(pos, max_len - 1)].set(
                jnp.where(pos < max_len, tok, buf[rows, max_len - 1]))
            return (buf, pos + 1), tok

        _, toks = jax.lax.scan(body, (buf, length), None, length=new_tokens)
        return toks.T

    fns = {"cached": cached, "reencode": reencode}
    toks = {name: np.asarray(fn(params, buf, length)) for name, fn in fns.items()}  # compiles
    secs = _time_interleaved({name: (lambda fn=fn: fn(params, buf, length).block_until_ready())
                              for name, fn in fns.items()}, args.repeats)
    results = {name: {"seconds": sec, "tokens_per_s": batch * new_tokens / sec}
               for name, sec in secs.items()}
    return {
        "batch": batch, "prompt_len": prompt_len, "new_tokens": new_tokens, "max_len": max_len,
        "d_model": args.d_model, "num_layers": args.num_layers, "num_heads": args.num_heads,
        "vocab": args.vocab, "repeats": args.repeats, **results,
        "speedup": results["cached"]["tokens_per_s"] / results["reencode"]["tokens_per_s"],
        "token_agreement": float(np.mean(toks["cached"] == toks["reencode"])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--case", type=int, nargs=4, action="append",
                        metavar=("B", "P", "T", "MAXLEN"),
                        help="batch, prompt length, new tokens, max_len (default: 512 6 4 10 and "
                             "512 16 16 32)")
    parser.add_argument("--vocab", type=int, default=16)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default="experiments/results/decode.json")
    args = parser.parse_args()

    rows = [bench_case(*case, args) for case in (args.case or DEFAULT_CASES)]
    print(f"device: {jax.devices()[0]}  jax {jax.__version__}  d_model={args.d_model} "
          f"layers={args.num_layers} heads={args.num_heads} vocab={args.vocab}")
    header = (f"{'batch':>6} {'prompt':>6} {'T':>4} {'max_len':>7} {'cached tok/s':>14} "
              f"{'re-encode tok/s':>16} {'speed-up':>9} {'agree':>6}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['batch']:>6} {r['prompt_len']:>6} {r['new_tokens']:>4} {r['max_len']:>7} "
              f"{r['cached']['tokens_per_s']:>14,.0f} {r['reencode']['tokens_per_s']:>16,.0f} "
              f"{r['speedup']:>8.2f}x {r['token_agreement']:>6.3f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": str(jax.devices()[0]), "jax": jax.__version__,
                               "results": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
