"""Implementations chosen per backend (a leaf: imports only JAX).

Some pieces of the networks were written for XLA:CPU, where they are measured faster than the plain
JAX form. Each is a ``network`` key, ``auto`` by default:

==========================  ===========================  =========================================
key                         ``auto`` on CPU / GPU         ``auto`` on TPU (GPU for recurrent_grad)
==========================  ===========================  =========================================
``network.conv_impl``       ``patch``: im2col patches     ``lax``: ``flax.linen.Conv``
                            times one matrix              (``lax.conv_general_dilated``)
                            (networks.PatchConv)
``network.recurrent_grad``  ``fused`` (CPU only): the     ``autodiff``: JAX's own derivative of the
                            GRU/LSTM scan's hand-         scanned cell
                            arranged JVP
                            (policies.scan_cell)
==========================  ===========================  =========================================

``patch`` on GPU is measured, not assumed: on one H200, PPO on Breakout-MinAtar ran 5.0x faster with it
than with ``lax.conv`` at 1,024 lanes (3.65M vs 727k env steps/s) and 3.6x at 32 lanes
(experiments/results/device_check/h200.md). Lanes vmap the conv over per-lane weights, which
``lax.conv`` turns into a grouped convolution with one group per lane; ``patch`` turns it into a
batched matmul. TPU keeps ``lax`` (not measured there); ``recurrent_grad`` on GPU/TPU is ``autodiff``,
the form XLA:GPU fuses (not measured against ``fused`` on a GPU).

Both choices of each key compute the same function with the same parameters (the same parameter tree
and initial values), so checkpoints load either way; floats differ in the last bits (another order of
sums), not in what is learnt. tests/test_implementations.py checks each pair against the other on CPU.
The third CPU-only choice, one XLA host device per core, is an ``XLA_FLAGS`` default that
purejaxrl_opt/host/xla_flags.py applies only when JAX will run on the CPU.
"""

from __future__ import annotations

import jax

CONV_IMPLS: tuple[str, ...] = ("auto", "patch", "lax")
RECURRENT_GRADS: tuple[str, ...] = ("auto", "fused", "autodiff")


def backend() -> str:
    """The platform JAX computes on by default: ``cpu``, ``gpu`` or ``tpu`` (``cuda``/``rocm`` -> gpu)."""
    platform = jax.default_backend()
    return "gpu" if platform in ("cuda", "rocm", "gpu") else platform


def conv_impl(choice: str = "auto", platform: str | None = None) -> str:
    """``patch`` or ``lax`` for ``network.conv_impl = choice`` on ``platform`` (default: :func:`backend`)."""
    if choice not in CONV_IMPLS:
        raise ValueError(f"conv_impl {choice!r}: must be one of {list(CONV_IMPLS)}")
    if choice != "auto":
        return choice
    return "lax" if (platform or backend()) == "tpu" else "patch"


def recurrent_grad(choice: str = "auto", platform: str | None = None) -> str:
    """``fused`` or ``autodiff`` for ``network.recurrent_grad = choice`` on ``platform``."""
    if choice not in RECURRENT_GRADS:
        raise ValueError(f"recurrent_grad {choice!r}: must be one of {list(RECURRENT_GRADS)}")
    if choice != "auto":
        return choice
    return "fused" if (platform or backend()) == "cpu" else "autodiff"


# updates per test of a budgeted update loop's condition on each backend (check_every = 0): a GPU
# reads every while_loop test's predicate back to the host; CPU and TPU decide on the device
CHECK_EVERY: dict[str, int] = {"cpu": 1, "tpu": 1, "gpu": 16}


def check_every(choice: int = 0, platform: str | None = None) -> int:
    """Updates between two tests of a budgeted update loop (``algo.check_every = choice``; 0 = auto)."""
    if choice < 0:
        raise ValueError(f"check_every {choice}: must be >= 0 (0 = auto)")
    return choice or CHECK_EVERY.get(platform or backend(), 1)


def describe(conv: str = "auto", grad: str = "auto") -> dict:
    """What runs here: ``{"backend", "conv_impl", "recurrent_grad"}`` (for summaries and device checks)."""
    return {"backend": backend(), "conv_impl": conv_impl(conv), "recurrent_grad": recurrent_grad(grad)}
