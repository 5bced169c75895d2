"""The minibatch shuffle on this CPU: ``jax.random.permutation`` against the project's
``core/stages/optim.py`` ``permutation`` (the same order, bitwise, from single-array integer sorts),
at the item counts of PPO's CartPole batches (4, 64 and 512 envs x 128 steps).

    python experiments/bench_shuffle.py --repeats 20

Each variant: one jitted ``lax.map`` of 40 permutations under 40 keys, checked equal, then timed
``--repeats`` times interleaved; the fastest call counts (ms per permutation). Writes
``experiments/results/bench_shuffle.json`` (commit, command, machine).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import provenance

import purejaxrl_opt.train  # noqa: F401  (the CLI's XLA flags, before JAX starts)

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    import jax
    import numpy as np

    from purejaxrl_opt.core.stages.optim import permutation

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 8192, 65536])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", default=str(ROOT / "experiments/results/bench_shuffle.json"))
    args = parser.parse_args()
    keys = jax.random.split(jax.random.PRNGKey(0), 40)
    record = {"load_before": provenance.load_average(), "machine": provenance.machine(), "sizes": {}}
    for n in args.sizes:
        variants = {"jax.random.permutation": jax.jit(lambda ks, n=n: jax.lax.map(lambda k: jax.random.permutation(k, n), ks)),
                    "optim.permutation": jax.jit(lambda ks, n=n: jax.lax.map(lambda k: permutation(k, n), ks))}
        outs = {name: np.asarray(fn(keys)) for name, fn in variants.items()}
        same = bool(np.array_equal(*outs.values()))
        times = {name: [] for name in variants}
        for _ in range(args.repeats):
            for name, fn in variants.items():
                start = time.perf_counter()
                jax.block_until_ready(fn(keys))
                times[name].append(time.perf_counter() - start)
        ms = {name: 1e3 * min(t) / len(keys) for name, t in times.items()}
        record["sizes"][str(n)] = {"ms_per_permutation": {k: round(v, 4) for k, v in ms.items()},
                                   "speedup": round(ms["jax.random.permutation"] / ms["optim.permutation"], 2),
                                   "bitwise_equal": same}
        print(f"{n:>7} items: jax {ms['jax.random.permutation']:.3f} ms, ours {ms['optim.permutation']:.3f} ms "
              f"({record['sizes'][str(n)]['speedup']}x), equal: {same}")
    record["load_after"] = provenance.load_average()
    provenance.write_json(args.out, record)


if __name__ == "__main__":
    main()
