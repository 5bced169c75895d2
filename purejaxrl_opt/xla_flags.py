"""XLA flags that must be set before JAX initialises its backend (a leaf: no package imports)."""

from __future__ import annotations

import importlib.util
import os


def set_default_xla_flags() -> None:
    """On CPU-only installs, compile with LLVM optimisation level 1 unless the user chose one.

    Measured on the CartPole PPO run: compile 9.1 s -> 7.0 s, identical training throughput. Set
    before JAX initialises its backend; a user's own ``--xla_backend_optimization_level`` wins.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    has_gpu_plugin = any(importlib.util.find_spec(name) is not None for name in
                         ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin", "libtpu"))
    if "xla_backend_optimization_level" not in flags and not has_gpu_plugin:
        os.environ["XLA_FLAGS"] = (flags + " --xla_backend_optimization_level=1").strip()
