"""experiments/count_kernels.py reads loops and thunk counts from XLA:CPU's optimised HLO: checked on a
program whose loops are known (a 7-trip loop nested in a 3-trip one), compiled here at the tests' flags."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import count_kernels  # noqa: E402


def _program() -> str:
    def inner(i, x):
        return jnp.tanh(x @ x.T + i) * 0.5

    def outer(i, x):
        return jax.lax.fori_loop(0, 7, inner, x + jnp.sin(x))

    return jax.jit(lambda x: jax.lax.fori_loop(0, 3, outer, x)).lower(jnp.ones((4, 4))).compile().as_text()


def test_loops_and_executions_follow_the_trip_counts():
    hlo = _program()
    found = count_kernels.loops(hlo)
    by_trip = {loop["trip_count"]: loop for loop in found}
    assert sorted(by_trip) == [3, 7], found
    inner, outer = by_trip[7], by_trip[3]
    assert inner["by_kind"].get("dot") == 1 and inner["nested"] == [], inner
    assert outer["nested"] == [inner["body"]], outer
    comps = count_kernels.computations(hlo)

    def own(name):  # the thunks of one computation, its loops' and callees' not included
        return sum(count_kernels.thunk_kinds(comps[name]).values())

    entry = count_kernels.entry_name(hlo)
    # XLA:CPU may wrap a small loop in a call: the wrapper's own thunks run once per time it is reached
    outer_wrapper = own(outer["in"]) if outer["in"] != entry else 0
    inner_wrapper = own(inner["in"]) if inner["in"] != outer["body"] else 0
    # each instruction once; a while also runs its body trip-count times
    assert count_kernels.executions(hlo) == (own(entry) + outer_wrapper
                                             + 3 * (outer["thunks"] + inner_wrapper + 7 * inner["thunks"]))
