"""Multi-device execution: lanes sharded over devices, and one agent data parallel over devices.

Both live inside the runner's jitted functions (``shard_map`` over a ``jax.sharding.Mesh``), never a
Python loop over devices. The mesh has two axes:

* ``lanes`` — the independent agents (seeds x swept configs) are split into equal blocks, one block
  per device row; no communication between lanes. Each device runs the same lane-vmapped program on
  its block, so the per-lane numbers are those of the unsharded run (tested bitwise).
* ``data`` — ``parallel.data = n`` devices share ONE agent: its ``num_envs`` envs are split into
  ``n`` shards, params and optimizer state are replicated, and the algorithm (built with
  ``axis_name="data"``) averages gradients, normalisation statistics and metrics with
  ``lax.pmean``/``psum`` (see :func:`purejaxrl_opt.core.algos.ppo.make_algorithm`).

``parallel.lanes=auto`` (default) splits the lanes into as many equal blocks as fit the local
devices (``devices / data`` lane rows at most; :func:`lane_rows`); ``off`` keeps all lanes on one
row. On a CPU-only host the CLI exposes one device per core (xla_flags.py), so lanes use every core.
A layout that does not fit (envs not divisible, more devices requested than exist) is a
:class:`ConfigError` before anything is compiled.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, ClassVar

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

# light: importing this module starts no JAX backend
from purejaxrl_opt.config.schema import _check, one_of, parse_section
from purejaxrl_opt.config.errors import ConfigError

LANES, DATA = "lanes", "data"


# the ``parallel`` section of a run (composed in host/settings.py): lanes, data, fsdp, and the
# jax.distributed settings
@dataclass(frozen=True)
class ParallelConfig:
    lanes: str = "auto"  # auto: lanes in as many equal blocks as there are devices (at most) | off
    data: int = 1  # devices per agent (data parallel); 1 = none
    # language-model runs: devices the params, optimizer state and batch are sharded over (FSDP), on a
    # data x fsdp mesh; 1 = none. Env runs: 1
    fsdp: int = 1
    # several processes (jax.distributed); null = from the environment (JAX_* or SLURM variables)
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    init_timeout_s: float = 60.0
    # how a device runs its block of lanes' updates: vmap (one batched program) | map (one lane after
    # another, lax.map: each lane runs the unbatched program of a one-lane run)
    lane_loop: str = "vmap"

    LANE_MODES: ClassVar[tuple[str, ...]] = ("auto", "off")
    LANE_LOOPS: ClassVar[tuple[str, ...]] = ("vmap", "map")

    def validate(self, prefix: str = "parallel") -> None:
        one_of(f"{prefix}.lanes", self.lanes, self.LANE_MODES)
        one_of(f"{prefix}.lane_loop", self.lane_loop, self.LANE_LOOPS)
        _check(self.data >= 1, f"{prefix}.data", self.data, "an int >= 1 (devices per agent)")
        _check(self.fsdp >= 1, f"{prefix}.fsdp", self.fsdp, "an int >= 1 (devices the params are sharded over)")
        _check(self.init_timeout_s > 0, f"{prefix}.init_timeout_s", self.init_timeout_s,
               "a number > 0 (seconds)")


def settings_from_config(section: dict | ParallelConfig | None) -> ParallelConfig:
    """The ``parallel`` section, parsed and checked (:class:`ParallelConfig`)."""
    return parse_section(ParallelConfig, section, "parallel")


def _divisors_hint(n: int, limit: int = 6) -> str:
    return ", ".join(str(n * k) for k in range(1, limit + 1))


@dataclass
class Layout:
    """The mesh for one run: ``lane_rows x data`` devices (``lane_rows`` may be 1)."""

    mesh: Mesh
    lane_rows: int
    data: int
    lane_loop: str = "vmap"  # ParallelConfig.lane_loop: how a device runs its lanes' updates

    @property
    def active(self) -> bool:
        return self.mesh.size > 1

    @property
    def lane_sharding(self) -> NamedSharding:
        return NamedSharding(self.mesh, P(LANES))

    @property
    def replicated(self) -> NamedSharding:
        return NamedSharding(self.mesh, P())

    def describe(self) -> dict:
        described = {"devices": int(self.mesh.size), "lane_shards": self.lane_rows, "data": self.data}
        return described if self.lane_loop == "vmap" else {**described, "lane_loop": self.lane_loop}


def lane_rows(num_lanes: int, max_rows: int) -> int:
    """How many equal lane blocks ``parallel.lanes=auto`` runs side by side: the largest divisor of
    ``num_lanes`` that is at most ``max_rows`` (the devices available per data group), so every
    block is the same lane-vmapped program (1 lane -> 1 device; 6 lanes on 4 devices -> 3)."""
    return max(r for r in range(1, min(num_lanes, max_rows) + 1) if num_lanes % r == 0)


def make_layout(settings: ParallelConfig, run, num_lanes: int, devices=None) -> Layout:
    """Check the layout against the run and build the mesh; every failure is a ConfigError."""
    if devices is None:  # every device of every process (jax.distributed), else the local ones
        devices = jax.devices() if jax.process_count() > 1 else jax.local_devices()
    devices = list(devices)
    n, data = len(devices), settings.data
    if settings.fsdp != 1:
        raise ConfigError(f"config key 'parallel.fsdp' = {settings.fsdp}: sharding the params (FSDP) is for "
                          "language-model runs (env=lm/...); use parallel.data for data parallelism here")
    if data > n:
        raise ConfigError(f"config key 'parallel.data' = {data}: only {n} device(s) available "
                          f"({devices[0].platform}); use parallel.data <= {n}")
    if n % data:
        raise ConfigError(f"config key 'parallel.data' = {data} does not divide the {n} devices; "
                          f"use one of {[d for d in range(1, n + 1) if n % d == 0]}")
    if data > 1:
        from purejaxrl_opt.core.algos import DATA_PARALLEL

        if run.algo.name not in DATA_PARALLEL:
            raise ConfigError(f"parallel.data = {data}: algo '{run.algo.name}' has no data-parallel "
                              f"mode yet (supported: {sorted(DATA_PARALLEL)})")
        num_envs = run.algo.num_envs
        if num_envs % data:
            raise ConfigError(f"parallel.data = {data} does not divide algo.num_envs = "
                              f"{num_envs}; use num_envs in {_divisors_hint(data)}, ... or another "
                              "parallel.data")
        local_batch = num_envs // data * run.algo.num_steps
        for field in ("num_minibatches", "critic_minibatches"):  # PPO / TRPO's critic
            minibatches = getattr(run.algo, field, None)
            if minibatches and local_batch % minibatches:
                raise ConfigError(f"parallel.data = {data}: the per-device batch "
                                  f"num_envs/data*num_steps = {local_batch} is not divisible by "
                                  f"algo.{field} = {minibatches}")
            # recurrent networks: a minibatch is whole env sequences, cut from each device's own envs
            if minibatches and run.network.is_recurrent and (num_envs // data) % minibatches:
                raise ConfigError(f"parallel.data = {data} with network.recurrent={run.network.recurrent}: "
                                  f"each device's num_envs/data = {num_envs // data} envs are cut into "
                                  f"algo.{field} = {minibatches} minibatches of whole env "
                                  f"sequences, so {field} must divide {num_envs // data}")
        # algo.recompute_advantages: a minibatch is whole unrolls, cut from each device's own envs
        if getattr(run.algo, "recompute_advantages", False):
            local_unrolls = local_batch // run.algo.unroll_steps()
            if local_unrolls % run.algo.num_minibatches:
                raise ConfigError(f"parallel.data = {data} with algo.recompute_advantages=true: "
                                  f"each device's num_envs/data*num_steps/unroll_length = {local_unrolls} "
                                  f"unrolls are cut into algo.num_minibatches = "
                                  f"{run.algo.num_minibatches} minibatches of whole unrolls, so "
                                  f"num_minibatches must divide {local_unrolls}")
    rows = lane_rows(num_lanes, n // data) if settings.lanes == "auto" else 1
    used = devices[: rows * data]
    mesh = Mesh(np.asarray(used, dtype=object).reshape(rows, data), (LANES, DATA))
    return Layout(mesh, rows, data, settings.lane_loop)


# ------------------------------------------------------------------------- language-model runs
FSDP = "fsdp"


def lm_mesh(settings: ParallelConfig, batch_sizes: dict[str, int], devices=None) -> Mesh | None:
    """The ``parallel.data x parallel.fsdp`` mesh (axes ``data``, ``fsdp``) of a language-model run, or
    None for one device. The params and optimizer state are split over ``fsdp`` (each array along its
    largest divisible axis: :func:`purejaxrl_opt.core.stages.lm_policy.fsdp_spec`) and replicated over ``data``;
    every batch of completions is split over both. ConfigError, before anything compiles, when the
    devices are too few or a number of completions (``batch_sizes``: what a config names -> its
    value, e.g. the batch and a micro-batch) does not divide over the ``data x fsdp`` devices."""
    if devices is None:  # every device of every process (jax.distributed), else the local ones
        devices = jax.devices() if jax.process_count() > 1 else jax.local_devices()
    devices = list(devices)
    size = settings.data * settings.fsdp
    if size > len(devices):
        raise ConfigError(f"config keys 'parallel.data' x 'parallel.fsdp' = {settings.data} x {settings.fsdp} "
                          f"= {size} devices: only {len(devices)} available ({devices[0].platform})")
    if size == 1:
        return None
    for name, value in batch_sizes.items():
        if value % size:
            raise ConfigError(f"{name} = {value} completions do not divide over parallel.data x parallel.fsdp "
                              f"= {size} devices (the completions are split over them): make it a multiple of "
                              f"{size} or use fewer devices")
    return Mesh(np.asarray(devices[:size], dtype=object).reshape(settings.data, settings.fsdp), (DATA, FSDP))


# ------------------------------------------------------------------------------------------ specs
def _is_env(x) -> bool:
    from purejaxrl_opt.core.stages import rollout  # lazily: env modules start the JAX backend on import

    return isinstance(x, rollout.EnvCarry)


def loop_specs(loop_shape) -> Any:
    """Per-leaf PartitionSpecs of the lane-vmapped Loop: env carries split over ``data`` along the
    env axis (axis 1 after the lane axis), everything else (params, optimizer, keys, metrics)
    replicated over ``data``; every leaf split over ``lanes`` on axis 0."""

    def spec(x):
        if _is_env(x):
            return jax.tree_util.tree_map(lambda _: P(LANES, DATA), x)
        return P(LANES)

    return jax.tree_util.tree_map(spec, loop_shape, is_leaf=_is_env)


def shardings(layout: Layout, specs) -> Any:
    return jax.tree_util.tree_map(lambda s: NamedSharding(layout.mesh, s), specs,
                                  is_leaf=lambda s: isinstance(s, P))


def wrap(layout: Layout, fn: Callable, in_specs, out_specs) -> Callable:
    """``fn`` (lane-vmapped, local shapes) as a global-shape function over the mesh.

    ``check_vma=False``: the shared rollout/loop code starts scan carries from constants, which the
    varying-axes type check rejects; replication over ``data`` of params, optimizer state and metrics
    is guaranteed by the algorithm's ``pmean``s instead (and tested: data-parallel == one device)."""
    return jax.shard_map(fn, mesh=layout.mesh, in_specs=in_specs, out_specs=out_specs,
                         check_vma=False)


def put(tree, sharding_tree) -> Any:
    """Host values (the same on every process) onto global shardings; multi-process safe."""
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding_tree)

    def one(x, sharding):
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree_util.tree_map(one, tree, sharding_tree)


def place(layout: Layout, tree, specs) -> Any:
    """Put a host pytree onto the mesh with ``specs`` (a full spec tree)."""
    return put(tree, shardings(layout, specs))


def to_host(tree) -> Any:
    """The global values of ``tree`` as numpy arrays on this process. With several processes this is
    a collective (``process_allgather``): every process must call it at the same point."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(tree, tiled=True)


def is_main_process() -> bool:
    """Only process 0 writes artifacts and logs."""
    return jax.process_index() == 0


# ------------------------------------------------------------------------------ several processes
def _probe(address: str, timeout_s: float) -> None:
    """Wait until the coordinator's port accepts connections (a reachability probe before
    ``jax.distributed.initialize``, which can otherwise block far longer or abort the process)."""
    import socket
    import time

    host, _, port = address.rpartition(":")
    deadline, error = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, int(port)), timeout=min(2.0, timeout_s)):
                return
        except OSError as err:
            error = err
            time.sleep(0.2)
    raise ConfigError(f"parallel.coordinator {address!r} is unreachable after {timeout_s:g} s "
                      f"({error}); start process 0 first, check host/port/firewall, or raise "
                      "parallel.init_timeout_s")


def initialize_distributed(section: dict | None) -> dict | None:
    """``jax.distributed.initialize`` from ``parallel.coordinator/num_processes/process_id`` or, when
    those are unset, from the environment (``JAX_COORDINATOR_ADDRESS``/``JAX_NUM_PROCESSES``/
    ``JAX_PROCESS_ID``, or SLURM with more than one task: JAX's own cluster auto-detection).
    Must run before JAX touches a device. Returns ``{process_id, num_processes}`` or None (single
    process). CPU processes talk through gloo collectives."""
    import os

    settings = settings_from_config(section)
    coordinator = settings.coordinator or os.environ.get("JAX_COORDINATOR_ADDRESS")
    num = settings.num_processes or os.environ.get("JAX_NUM_PROCESSES")
    pid = settings.process_id
    pid = pid if pid is not None else os.environ.get("JAX_PROCESS_ID")
    timeout = settings.init_timeout_s
    slurm = int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1 and "SLURM_JOB_ID" in os.environ
    if coordinator is None and num is None and not slurm:
        return None
    global _DISTRIBUTED
    if _DISTRIBUTED is not None:  # e.g. a second run in the same process (Hydra multirun)
        return _DISTRIBUTED
    if coordinator is None:  # SLURM: let JAX's cluster detection find everything
        _cpu_collectives()
        jax.distributed.initialize(initialization_timeout=int(timeout))
    else:
        try:
            num, pid = int(num), int(pid)
        except (TypeError, ValueError):
            raise ConfigError("parallel.coordinator is set: parallel.num_processes and "
                              f"parallel.process_id must be ints (got {num!r}, {pid!r})") from None
        if not 0 <= pid < num:
            raise ConfigError(f"parallel.process_id = {pid} must be in [0, {num})")
        if ":" not in str(coordinator):
            raise ConfigError(f"parallel.coordinator = {coordinator!r} must be host:port")
        if pid != 0:
            _probe(str(coordinator), float(timeout))
        _cpu_collectives()
        jax.distributed.initialize(str(coordinator), num, pid, initialization_timeout=int(timeout))
    _DISTRIBUTED = {"process_id": jax.process_index(), "num_processes": jax.process_count()}
    return _DISTRIBUTED


_DISTRIBUTED: dict | None = None


def _cpu_collectives() -> None:
    """Cross-process collectives on CPU devices go through gloo (no effect on GPU/TPU devices)."""
    jax.config.update("jax_cpu_collectives_implementation", "gloo")


__all__ = ["ParallelConfig", "Layout", "make_layout", "lm_mesh", "settings_from_config", "loop_specs",
           "wrap", "place", "put", "to_host", "is_main_process",
           "initialize_distributed", "sharded_functions"]


def lane_updates(algo, lane_loop: str = "vmap"):
    """``(loop, start, stop) -> loop``: the updates of a block of lanes (the Loop's leading axis).
    ``vmap``: one batched program over the lanes; ``map``: the lanes one after another
    (``lax.map``), each the unbatched program of a one-lane run (inside a loop, so floats agree with
    the single-seed run within float tolerance, not bitwise). XLA:CPU runs some batched programs
    slower than the same work one lane after another (MJX physics: Playground, Brax)."""
    from purejaxrl_opt.core.algos.base import run_updates

    if lane_loop == "map":
        def updates(loop, start, stop):
            return jax.lax.map(lambda lane: run_updates(algo, lane, start, stop), loop)

        return updates
    return jax.vmap(partial(run_updates, algo), in_axes=(0, None, None))


def sharded_functions(layout: Layout, algo, keys, hparams, data_algo=None):
    """``(init, updates, evaluate, loop_specs, global_loop_shape)``: the runner's three lane-vmapped
    functions as ``shard_map``s over ``layout.mesh`` (not yet jitted). ``algo`` gives the Loop's
    structure; ``data_algo`` (built with ``axis_name="data"``) runs when ``layout.data > 1``."""
    from purejaxrl_opt.core.stages import evaluation
    from purejaxrl_opt.core.algos.base import init_loop

    run_algo = data_algo if data_algo is not None else algo
    template = jax.eval_shape(jax.vmap(partial(init_loop, algo)), keys, hparams)
    specs = loop_specs(template)
    init = wrap(layout, jax.vmap(partial(init_loop, run_algo)), (P(LANES), P(LANES)), specs)
    updates = wrap(layout, lane_updates(run_algo, layout.lane_loop), (specs, P(), P()), specs)
    evaluate = wrap(layout, jax.vmap(partial(evaluation.final_returns, run_algo)), (specs,), P(LANES))
    return init, updates, evaluate, specs, jax.eval_shape(init, keys, hparams)
