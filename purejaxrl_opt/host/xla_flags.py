"""XLA flags that must be set before JAX initialises its backend, and the CPU lowering of JAX's random
hash (a leaf: no package imports)."""

from __future__ import annotations

import importlib.util
import os

GPU_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin", "libtpu")
# XLA:CPU hands these to YNNPACK as fusions (jaxlib 0.9.2's default, individual_dot, runs each product
# through YNNPACK from XLA's own product thunks): see set_default_xla_flags(language_model=True)
LM_YNN_FUSION_TYPES = "dot,eltwise,reduce"


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity API (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def runs_on_cpu() -> bool:
    """Whether JAX will compute on the CPU: ``JAX_PLATFORMS`` when set (its first entry is the default
    backend), else whether no GPU/TPU plugin is installed. Decided without importing JAX, whose
    backend must not initialise before the flags are set."""
    platforms = [p.strip() for p in os.environ.get("JAX_PLATFORMS", "").split(",") if p.strip()]
    if platforms:
        return platforms[0] == "cpu"
    return not any(importlib.util.find_spec(name) is not None for name in GPU_PLUGINS)


def set_default_xla_flags(language_model: bool = False) -> None:
    """When JAX will run on the CPU (:func:`runs_on_cpu`: ``JAX_PLATFORMS=cpu``, or no GPU/TPU plugin
    installed), unless the user chose otherwise in ``XLA_FLAGS``:

    * LLVM optimisation level 1 (``--xla_backend_optimization_level=1``). Measured on the CartPole
      PPO run: compile 9.1 s -> 7.0 s, identical training throughput.
    * One host device per usable core (``--xla_force_host_platform_device_count``), so that
      ``parallel.lanes=auto`` runs blocks of lanes (seeds, swept configs) side by side, one block per
      core. A lane-vmapped update of a small network is a chain of small ops that XLA:CPU runs one
      after another on one core (its intra-op threads only split large ops); one program per core
      uses them all. Measured on 2 cores, PPO CartPole 8 lanes x 4 envs: 217k -> 455k env steps/s,
      the same numbers lane for lane there; a one-lane run stays on one device, at the same speed
      (its large ops still use every core). See experiments/bench_throughput.py. A block of lanes is
      another program than all lanes in one, so floats can differ (TRPO CartPole, 16 seeds: 8 ended
      elsewhere); set the device count to 1 to reproduce one-device numbers.

    * With ``language_model`` (the entry points that run a pretrained causal LM:
      ``purejaxrl_opt.generate``), matrix products, elementwise chains and reductions go to YNNPACK
      (``--xla_cpu_experimental_ynn_fusion_type=dot,eltwise,reduce``) instead of Eigen: SmolLM2-135M's
      decode at batch 64 spent less CPU time per token (experiments/bench_generate_interleaved.py,
      docs/language-models.md). Its products round differently from Eigen's, so logits differ in the
      last bits (the parity tests hold with it). The training CLI's programs get YNNPACK's products
      per compile instead (:func:`cpu_compile_options`).

    * With ``PUREJAXRL_OPT_THREEFRY=unrolled``: JAX's threefry hash (every ``jax.random`` draw) lowered
      unrolled, as JAX lowers it for GPUs (:func:`unroll_threefry`); by default JAX's own CPU lowering.

    On a GPU/TPU nothing is set: the lanes of a run are one program on the accelerator, and
    ``--xla_force_host_platform_device_count`` would only split the CPU, which then merely feeds it.
    Set before JAX initialises its backend (the CLI entry points call this first thing); a user's own
    flags win. Python users of ``make_train`` get plain JAX.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if not runs_on_cpu():
        return
    extra = []
    if "xla_backend_optimization_level" not in flags:
        extra.append("--xla_backend_optimization_level=1")
    cores = usable_cores()
    if "xla_force_host_platform_device_count" not in flags and cores > 1:
        extra.append(f"--xla_force_host_platform_device_count={cores}")
    if language_model and "xla_cpu_experimental_ynn_fusion_type" not in flags:
        extra.append(f"--xla_cpu_experimental_ynn_fusion_type={LM_YNN_FUSION_TYPES}")
    if extra:
        os.environ["XLA_FLAGS"] = " ".join([flags] + extra).strip()
    choice = os.environ.get(THREEFRY_ENV, "rolled")
    if choice != "rolled":  # JAX's own lowering unless asked (nothing of JAX's is touched then)
        unroll_threefry(choice)


# XLA:CPU's products as well as its reductions handed to YNNPACK, per compile (cpu_compile_options)
YNN_PRODUCTS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT,LIBRARY_FUSION_TYPE_REDUCE"}
YNN_UNSUPPORTED = "Fusion kind not implemented"


def cpu_compile_options() -> dict:
    """The compile options the CLI's programs are compiled with (``chunks.compile_lowered``): on the CPU,
    matrix products as well as reductions handed to YNNPACK as fusions (jaxlib 0.9.2's default,
    ``individual_dot``, calls YNNPACK's product kernels from XLA's own product thunks), unless ``XLA_FLAGS`` chooses ``xla_cpu_experimental_ynn_fusion_type`` (the language-model
    entry points do, :func:`set_default_xla_flags`); nothing on a GPU/TPU. Measured through the training
    CLI (experiments/bench_ynn_dots.py): every update's metrics byte for byte the same, more env steps/s.
    Per compile rather than in ``XLA_FLAGS`` because XLA:CPU cannot compile some programs with it (a
    product inside a small loop: ``UNIMPLEMENTED: Fusion kind not implemented``); those are compiled
    again without it. Imports JAX (its backend must be up)."""
    if "xla_cpu_experimental_ynn_fusion_type" in os.environ.get("XLA_FLAGS", ""):
        return {}
    import jax

    return dict(YNN_PRODUCTS) if jax.default_backend() == "cpu" else {}


THREEFRY_ENV = "PUREJAXRL_OPT_THREEFRY"
THREEFRY_CHOICES = ("unrolled", "rolled")


def unroll_threefry(choice: str = "unrolled") -> None:
    """Lower JAX's ``threefry2x32`` (the hash behind every ``jax.random`` draw, key split and fold-in)
    for the CPU as JAX lowers it for GPUs: its 20 rounds in line (``unrolled``), or as JAX does for the
    CPU, a loop of 5 iterations of 4 rounds (``rolled``), which XLA:CPU runs as a while loop of 16 small
    kernels per draw. A PPO rollout step draws several times, so at a few envs those loops are most of
    the kernels an update launches (experiments/count_kernels.py). The hash is integer arithmetic and
    its draws are the same bits either way (tests/test_xla_flags.py), but a whole training program is
    not: without the loop XLA fuses the float arithmetic around the draws differently (multiply-adds
    contracted elsewhere), so runs differ in the last bits and then beyond. That is why it is opt-in
    (``PUREJAXRL_OPT_THREEFRY=unrolled`` for the CLI's entry points; experiments/bench_threefry.py
    measures both). It changes how JAX lowers the op in this process. Imports JAX, but does not start
    its backend."""
    if choice not in THREEFRY_CHOICES:
        raise ValueError(f"environment variable {THREEFRY_ENV}={choice!r} is invalid; allowed: "
                         f"{list(THREEFRY_CHOICES)}")
    from jax._src import prng
    from jax._src.interpreters import mlir

    rule = prng._threefry2x32_lowering_rule if choice == "unrolled" else prng._threefry2x32_cpu_lowering_rule
    mlir.register_lowering(prng.threefry2x32_p, rule, platform="cpu")
