"""Save and restore the complete training state of a run (the lane-vmapped ``Loop``) with orbax.

A checkpoint is ``RUN_DIR/checkpoints/<update>/`` written by an orbax ``CheckpointManager``: orbax
writes into a temporary directory and renames it only once every file is written, so a crash (even
SIGKILL) mid-save leaves no directory that looks like a finished checkpoint. Each holds two items:

* ``state`` -- every leaf of the ``Loop`` (params, optimizer states, env states, RNG keys, update
  counter, the metrics buffer so far, the per-lane hyperparameters) as host arrays named
  ``leaf_0000 ...`` (``i`` = the leaf's index in the flattened ``Loop``); the pytree structure is not
  stored, it is rebuilt from the config, which is what makes a mismatch detectable. A leaf with no
  elements (MJX states carry some, e.g. ``data.act`` of shape ``(n, 32, 0)``; orbax refuses to write
  them) has no entry: its shape and dtype are in the manifest, and restoring rebuilds it empty;
* ``manifest`` -- JSON: the update counter, a *fingerprint* of everything that determines the
  training program (the run config minus evaluation-only keys, the sweep plan, every leaf's path,
  shape and dtype) and a SHA-256 of every leaf, checked on restore (a truncated or flipped file is
  reported as corrupt instead of resuming from garbage).

Restoring refuses, with the differing keys named, a checkpoint from another algorithm, env, network
shape, sweep or any other config difference; nothing is written or deleted when it refuses.

Saves are synchronous (the runner saves while the device computes the next chunk, so nothing waits
on them): a failed write (permissions, a full disk, any orbax error) raises :class:`CheckpointWriteError`
at once in the caller, with orbax's unfinished temporary directory removed and the earlier
checkpoints untouched. (orbax's asynchronous saves create their directories on another thread; when
that fails, its writer threads wait 300 s for a signal that never comes.)
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from purejaxrl_opt.config.errors import ConfigError
from purejaxrl_opt.config.flat import flatten
from purejaxrl_opt.config.schema import _check

FORMAT = 1
DIRNAME = "checkpoints"
# keys of the run config that only affect the final evaluation, not the training state
EVAL_ONLY_KEYS = ("eval_episodes", "eval_deterministic")
IMPLEMENTATION_KEYS = ("conv_impl", "recurrent_grad")  # network keys (purejaxrl_opt/config/implementations.py)
# (section, key) -> default of keys added after checkpoints of format 1 were written: left out of the
# fingerprint at their default (they change nothing there), so those checkpoints still resume
LATER_KEYS = {("env", "reward_scale"): 1.0, ("env", "obs_norm_style"): "project",
              ("network", "action_dist"): "gaussian", ("algo", "unroll_length"): 0,
              ("algo", "recompute_advantages"): False, ("algo", "check_every"): 0,
              ("network", "init"): "orthogonal", ("algo", "adam_eps"): 1e-5, ("algo", "reset_envs_every"): 0}


# the ``checkpoint`` section of a training run (composed in host/settings.py): when the runner saves
# and how many it keeps (CheckpointManager's keep)
@dataclass(frozen=True)
class CheckpointConfig:
    every_updates: int = 0  # save every N updates (0 = never)
    final: bool = True  # save after the last update (what `purejaxrl_opt.evaluate` loads)
    keep: int | None = None  # keep only the newest K checkpoints (None = all)

    def validate(self, prefix: str = "checkpoint") -> None:
        _check(self.every_updates >= 0, f"{prefix}.every_updates", self.every_updates,
               "an int >= 0 (0 = no periodic checkpoints)")
        _check(self.keep is None or self.keep >= 1, f"{prefix}.keep", self.keep, "null or an int >= 1")

    @property
    def enabled(self) -> bool:
        return self.every_updates > 0 or self.final


class CheckpointError(ValueError):
    """No checkpoint where one is needed, a checkpoint that does not match the run, or a corrupt one."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint whose files are unreadable or whose data does not match its digests."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (the message names the directory, the update and the cause)."""


def _quiet_orbax() -> None:
    # orbax logs every save/restore at INFO/WARNING through absl, and a failed write once per worker
    # thread with a traceback; the runner prints its own lines, and a failure is reported once by
    # the exception orbax raises in the caller
    for name in ("absl", "orbax", "orbax.checkpoint"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _ocp():
    import orbax.checkpoint as ocp

    _quiet_orbax()
    return ocp


def checkpoint_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir).absolute() / DIRNAME


def _leaf_paths(tree) -> list[str]:
    return [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def structure(tree) -> dict[str, list]:
    """``{leaf path: [shape, dtype]}`` of ``tree`` (arrays or shape/dtype structs): what a manifest
    records of every leaf, and what a restore compares before reading any data."""
    return {path: [list(leaf.shape), str(leaf.dtype)]
            for path, leaf in zip(_leaf_paths(tree), jax.tree_util.tree_leaves(tree))}


ITEMS = ("state", "manifest")  # the two items of every checkpoint of this format


def _manager(directory: Path, write: bool = False, keep: int | None = None, **options):
    """The orbax manager of the numbered checkpoints in ``directory`` (which must exist to write):
    items :data:`ITEMS`, synchronous saves (see the module's docstring), ``keep`` the newest."""
    ocp = _ocp()
    if write:
        settings = ocp.CheckpointManagerOptions(max_to_keep=keep, create=False,
                                                enable_async_checkpointing=False, **options)
    else:
        settings = ocp.CheckpointManagerOptions(read_only=True, create=False)
    return ocp.CheckpointManager(directory, options=settings, item_names=ITEMS)


def _save(manager, step: int, host: list, manifest: dict) -> None:
    """Write the host leaves ``host`` (named by :func:`_stored`) and ``manifest`` as ``step``."""
    ocp = _ocp()
    manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(_stored(host)),
                                               manifest=ocp.args.JsonSave(manifest)))


def _read_manifest(directory: Path, step: int) -> Any:
    """The manifest item of checkpoint ``step`` of ``directory`` (orbax's error when unreadable)."""
    ocp = _ocp()
    manager = _manager(directory)
    try:
        return manager.restore(step, args=ocp.args.Composite(manifest=ocp.args.JsonRestore())).manifest
    finally:
        manager.close()


def _read_state(directory: Path, step: int, leaves) -> dict:
    """The state item of checkpoint ``step``, read into host arrays of ``leaves``' shapes and dtypes
    (orbax's error when unreadable; verify it with :func:`_verified_leaves`)."""
    ocp = _ocp()
    target = _stored([np.zeros(leaf.shape, leaf.dtype) for leaf in leaves])
    manager = _manager(directory)
    try:
        return manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target))).state
    finally:
        manager.close()


def _stored(leaves) -> dict[str, Any]:
    """The leaves orbax writes, by name: every leaf with at least one element (orbax refuses to
    write empty arrays; their shape and dtype are in the manifest, which is all they hold)."""
    return {f"leaf_{i:04d}": leaf for i, leaf in enumerate(leaves) if int(np.prod(leaf.shape)) > 0}


def _verified_leaves(state: dict, leaves, paths, manifest: dict, where) -> list:
    """The restored leaves as host arrays (empty ones rebuilt from ``leaves``' shapes and dtypes),
    each checked against the digest saved in ``manifest``."""
    host = [np.asarray(state[f"leaf_{i:04d}"]) if int(np.prod(leaf.shape)) > 0
            else np.zeros(leaf.shape, leaf.dtype) for i, leaf in enumerate(leaves)]
    for path, array in zip(paths, host):
        if _digest(array) != manifest["digests"].get(path):
            raise CorruptCheckpointError(f"checkpoint {where} is corrupt: the data of leaf {path} does "
                                         "not match the digest recorded when it was saved")
    return host


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def fingerprint(run, plan, loop_shape) -> dict:
    """Everything that must match for a checkpoint to continue this run bitwise."""
    config = asdict(run)
    for key in EVAL_ONLY_KEYS:
        config.pop(key, None)
    # per-backend implementation keys at their default are left out, so checkpoints written before
    # these keys existed still resume; an explicit choice is part of the fingerprint
    for key in IMPLEMENTATION_KEYS:
        if config["network"].get(key) == "auto":
            config["network"].pop(key)
    for (section, key), default in LATER_KEYS.items():
        if config[section].get(key) == default:
            config[section].pop(key)
    # through JSON so tuples compare equal to the lists read back from a manifest
    import json

    return json.loads(json.dumps({"config": config, "sweep": plan.to_dict() if plan else None,
                                  "structure": structure(loop_shape)}))


def _importance(key: str) -> tuple:
    """Algorithm and env first: a different algo also differs in most ``algo.*`` keys."""
    return (key not in ("algo.name", "env.id"), key)


def mismatches(saved: dict, current: dict) -> list[str]:
    """``'key: checkpoint has A, this run has B'`` for every differing fingerprint key.

    Config and sweep differences come first, named by their config key (``network.hidden_sizes``);
    array shapes are only listed when nothing else explains them.
    """
    missing = object()
    show = lambda v: "nothing" if v is missing else repr(v)  # noqa: E731

    def _diff(a: dict, b: dict, prefix: str = "") -> list[str]:
        a, b = flatten(a, prefix, keep_empty=True), flatten(b, prefix, keep_empty=True)
        return [f"{key}: checkpoint has {show(a.get(key, missing))}, this run has {show(b.get(key, missing))}"
                for key in sorted(set(a) | set(b), key=_importance) if a.get(key, missing) != b.get(key, missing)]

    lines = _diff(saved.get("config", {}), current.get("config", {}))
    if saved.get("sweep") != current.get("sweep"):
        lines.append(f"sweep: checkpoint has {saved.get('sweep')!r}, this run has {current.get('sweep')!r}")
    shapes = [f"array {path}: checkpoint has {show(saved.get('structure', {}).get(path, missing))}, "
              f"this run has {show(current.get('structure', {}).get(path, missing))}"
              for path in sorted(set(saved.get("structure", {})) | set(current.get("structure", {})))
              if saved.get("structure", {}).get(path) != current.get("structure", {}).get(path)]
    if shapes and lines:
        lines.append(f"... so {len(shapes)} array(s) of the training state differ in shape or dtype")
    else:
        lines += shapes
    return lines


def available_steps(run_dir: str | os.PathLike) -> list[int]:
    """Finished checkpoints (orbax renames a checkpoint into place only once it is complete)."""
    directory = checkpoint_dir(run_dir)
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit())


def check_writable(run_dir: str | os.PathLike) -> None:
    """Create ``run_dir/checkpoints`` and a file in it (removed again), so that a directory the run
    cannot write is refused before anything compiles (CheckpointError), not at the first save."""
    import tempfile

    directory = checkpoint_dir(run_dir)
    existed = directory.exists()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=directory, prefix=".write-test-")
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        if not existed:
            try:
                directory.rmdir()
            except OSError:
                pass
        raise CheckpointError(f"cannot write checkpoints into {directory}: {_reason(error)}; nothing "
                              "was written") from None


def remove_steps(run_dir: str | os.PathLike, steps) -> None:
    """Delete the checkpoints of ``steps`` (those after the one a run resumes from: it writes them
    again, bitwise, so a corrupt one is replaced)."""
    import shutil

    for step in steps:
        shutil.rmtree(checkpoint_dir(run_dir) / str(int(step)))


def _reason(error: BaseException) -> str:
    """One line for an OSError or an orbax/tensorstore error (whose text may span lines)."""
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror} ({error.filename})" if error.filename else error.strerror
    text = " ".join(str(error).split()) or type(error).__name__
    # tensorstore's messages name the file first and the cause (the OS error) last
    return text if len(text) <= 400 else f"{text[:150]} ... {text[-220:]}"


def _ignore_closed_loop(hook):
    """``sys.unraisablehook`` that drops asyncio's 'Event loop is closed' and passes the rest to
    ``hook``."""
    if getattr(hook, "_drops_closed_loop", False):
        return hook

    def _hook(unraisable):
        error = unraisable.exc_value
        if not (isinstance(error, RuntimeError) and str(error) == "Event loop is closed"):
            hook(unraisable)

    _hook._drops_closed_loop = True
    return _hook


class Checkpointer:
    """Writes checkpoints of one run. ``save`` returns once the checkpoint is complete on disk, or
    raises CheckpointWriteError (the earlier checkpoints kept, no temporary directory left)."""

    def __init__(self, run_dir: str | os.PathLike, fingerprint: dict, keep: int | None = None,
                 extra: dict | None = None):
        ocp = _ocp()
        self.fingerprint = fingerprint
        self.extra = dict(extra or {})  # more manifest entries (e.g. the run's evaluation settings)
        self.directory = checkpoint_dir(run_dir)
        # when a write fails, orbax closes its event loop while other writes are under way; each of
        # them then reports back into the closed loop (RuntimeError 'Event loop is closed', printed
        # with a traceback), during the save and after it: the failure is reported once, by save()
        sys.unraisablehook = _ignore_closed_loop(sys.unraisablehook)
        extra_options = {}
        if jax.process_count() > 1:  # jax.distributed: only process 0 writes (host arrays, no sync)
            extra_options["multiprocessing_options"] = ocp.options.MultiprocessingOptions(
                primary_host=0, active_processes={0})
        try:
            self.directory.mkdir(parents=True, exist_ok=True)  # orbax refuses create=True with the above
            self.manager = _manager(self.directory, write=True, keep=keep, **extra_options)
        except Exception as error:  # noqa: BLE001 - any failure to set up writing is a write failure
            raise CheckpointWriteError(f"cannot write checkpoints into {self.directory}: "
                                       f"{_reason(error)}") from None
        self.saved: list[int] = []

    def save(self, loop, update_idx: int) -> None:
        """Write the state ``loop`` reached at update ``update_idx`` as ``checkpoints/<update_idx>``
        (nothing when that checkpoint exists, e.g. when a finished run is resumed)."""
        if update_idx in available_steps(self.directory.parent):
            return
        host = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(jax.device_get(loop))]
        paths = list(self.fingerprint["structure"])
        manifest = {
            "format": FORMAT,
            "update_idx": int(update_idx),
            "fingerprint": self.fingerprint,
            "digests": {path: _digest(a) for path, a in zip(paths, host)},
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "jax_version": jax.__version__,
            **self.extra,
        }
        try:
            _save(self.manager, update_idx, host, manifest)
        except Exception as error:  # noqa: BLE001 - permissions, a full disk, any orbax error
            self._remove_unfinished(update_idx)
            kept = available_steps(self.directory.parent)
            raise CheckpointWriteError(
                f"could not write the checkpoint of update {update_idx} into {self.directory}: "
                f"{_reason(error)}. " + (f"The earlier checkpoints {kept} are kept."
                                         if kept else "No earlier checkpoint exists.")) from None
        self.saved.append(int(update_idx))

    def _remove_unfinished(self, update_idx: int) -> None:
        """Remove orbax's temporary directory of a failed save. The writes orbax had started still
        finish (or fail) on tensorstore's threads after the error and may recreate part of it: removed
        until none has appeared for 0.3 s (at most ~3 s)."""
        import shutil

        quiet = 0
        for _ in range(30):
            found = list(self.directory.glob(f"{update_idx}.orbax-checkpoint-tmp*"))
            for path in found:
                shutil.rmtree(path, ignore_errors=True)
            quiet = 0 if found else quiet + 1
            if quiet >= 3:
                return
            time.sleep(0.1)

    def close(self) -> None:
        self.manager.close()


def _choose_step(run_dir, step: int | None) -> int:
    steps = available_steps(run_dir)
    if not steps:
        raise CheckpointError(f"no checkpoint in {checkpoint_dir(run_dir)}: nothing to resume or "
                              "evaluate (checkpoints are written with checkpoint.every_updates=N or "
                              "checkpoint.final=true)")
    if step is None:
        return steps[-1]
    if step not in steps:
        raise CheckpointError(f"no checkpoint for update {step} in {checkpoint_dir(run_dir)}; "
                              f"available: {steps}")
    return step


def read_manifest(run_dir: str | os.PathLike, step: int | None = None) -> tuple[int, dict]:
    """``(step, manifest)`` of the latest (or the given) checkpoint of ``run_dir``."""
    step = _choose_step(run_dir, step)
    where = checkpoint_dir(run_dir) / str(step)
    try:
        manifest = _read_manifest(checkpoint_dir(run_dir), step)
    except Exception as error:  # noqa: BLE001 - any read failure means the checkpoint is unusable
        raise CorruptCheckpointError(f"checkpoint {where} is corrupt or unreadable (manifest: {error}); "
                                     f"other checkpoints: {available_steps(run_dir)}") from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or "fingerprint" not in manifest:
        raise CorruptCheckpointError(f"checkpoint {where} is corrupt or not a purejaxrl_opt checkpoint "
                              "(manifest without format/fingerprint)")
    return step, manifest


def restore(run_dir: str | os.PathLike, expected_fingerprint: dict, loop_shape,
            step: int | None = None) -> tuple[Any, int]:
    """The training state saved at update ``step`` (default: the latest), as host arrays in the
    structure of ``loop_shape``; refuses a checkpoint whose fingerprint differs from this run's."""
    step, manifest = read_manifest(run_dir, step)
    where = checkpoint_dir(run_dir) / str(step)
    diff = mismatches(manifest["fingerprint"], expected_fingerprint)
    if diff:
        shown = "\n  ".join(diff[:12]) + (f"\n  ... and {len(diff) - 12} more" if len(diff) > 12 else "")
        raise CheckpointError(
            f"checkpoint {where} does not match this run's config ({len(diff)} difference(s)):\n  "
            f"{shown}\nResume with the same config as the original run (its overrides are in "
            f"{Path(run_dir) / '.hydra' / 'overrides.yaml'}). Nothing was written.")
    leaves, treedef = jax.tree_util.tree_flatten(loop_shape)
    paths = list(expected_fingerprint["structure"])
    try:
        state = _read_state(checkpoint_dir(run_dir), step, leaves)
    except Exception as error:  # noqa: BLE001
        raise CorruptCheckpointError(f"checkpoint {where} is corrupt or unreadable ({type(error).__name__}: "
                                     f"{error}); other checkpoints: {available_steps(run_dir)}") from error
    host = _verified_leaves(state, leaves, paths, manifest, where)
    if int(manifest["update_idx"]) != step:
        raise CorruptCheckpointError(f"checkpoint {where} is corrupt: its manifest says update "
                              f"{manifest['update_idx']}")
    loop = jax.tree_util.tree_unflatten(treedef, host)
    counters = np.asarray(getattr(loop, "update_idx", step))
    # a lane whose budget of env steps was spent (GRPO) stopped counting before the others
    if not np.all(counters <= step):
        raise CorruptCheckpointError(f"checkpoint {where} is corrupt: its update counters {counters.tolist()} "
                              f"are not {step}")
    return loop, step


def check_resume_dir(resume: str, step: int | None = None) -> None:
    """A run dir to continue must exist and hold at least one finished checkpoint, and the one of
    update ``step`` when given (``resume_step``) (ConfigError)."""
    if not os.path.isdir(resume):
        raise ConfigError(f"config key 'resume' = {resume!r} is invalid: must be an existing run "
                          "directory")
    steps = available_steps(resume)
    if not steps:
        raise ConfigError(f"config key 'resume' = {resume!r}: no checkpoint in "
                          f"{checkpoint_dir(resume)} (a run writes checkpoints with "
                          "checkpoint.every_updates=N, and its final one with checkpoint.final=true)")
    if step is not None and step not in steps:
        raise ConfigError(f"config key 'resume_step' = {step!r} is invalid: {checkpoint_dir(resume)} "
                          f"holds the checkpoints of updates {steps}")


# --------------------------------------------------------------------------- single pytrees
def save_tree(directory: str | os.PathLike, tree, manifest: dict) -> None:
    """One pytree (e.g. a supervised policy's params) as an orbax checkpoint in the same format as
    the training state's: ``directory/0/`` with items ``state`` (leaves ``leaf_0000 ...``) and
    ``manifest`` (``manifest`` plus ``format``, every leaf's path, shape and dtype under
    ``fingerprint.structure`` and a SHA-256 of every leaf under ``digests``). Written atomically by
    orbax; an existing checkpoint in ``directory`` is replaced."""
    import shutil

    directory = Path(directory).absolute()
    shutil.rmtree(directory, ignore_errors=True)
    host = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(jax.device_get(tree))]
    paths = _leaf_paths(tree)
    full = {**manifest, "format": FORMAT,
            "fingerprint": {**manifest.get("fingerprint", {}),
                            "structure": {p: [list(a.shape), str(a.dtype)] for p, a in zip(paths, host)}},
            "digests": {p: _digest(a) for p, a in zip(paths, host)}}
    directory.mkdir(parents=True)
    manager = _manager(directory, write=True)
    _save(manager, 0, host, full)
    manager.close()


def is_tree(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` holds a finished :func:`save_tree` checkpoint (orbax renames its
    ``0/`` into place only once every file is written)."""
    return (Path(directory) / "0").is_dir()


def tree_steps(run_dir: str | os.PathLike) -> list[int]:
    """The finished :func:`save_tree` checkpoints ``run_dir/checkpoints/<step>/`` (a run that saves
    one pytree per step, e.g. a language-model run), by step."""
    return [step for step in available_steps(run_dir) if is_tree(checkpoint_dir(run_dir) / str(step))]


def read_tree_manifest(directory: str | os.PathLike) -> dict:
    """The manifest of a :func:`save_tree` checkpoint (CheckpointError if there is none)."""
    directory = Path(directory).absolute()
    if not is_tree(directory):
        raise CheckpointError(f"no checkpoint in {directory}")
    try:
        manifest = _read_manifest(directory, 0)
    except Exception as error:  # noqa: BLE001
        raise CheckpointError(f"checkpoint {directory} is corrupt or unreadable ({error})") from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {directory} is not a purejaxrl_opt checkpoint")
    return manifest


def restore_tree(directory: str | os.PathLike, template, config: dict | None = None) -> tuple[Any, dict]:
    """``(tree, manifest)`` of a :func:`save_tree` checkpoint, in the structure of ``template``
    (arrays or shape/dtype structs); CheckpointError when the leaves' paths, shapes or dtypes differ
    from the template's or a leaf's data does not match its digest, and, given ``config``, when the
    manifest's ``fingerprint.config`` differs from it (the differing keys named)."""
    directory = Path(directory).absolute()
    manifest = read_tree_manifest(directory)
    if config is not None:
        differing = mismatches({"config": manifest["fingerprint"].get("config", {})}, {"config": config})
        if differing:
            raise CheckpointError(f"checkpoint {directory} was written by another configuration: "
                                  + "; ".join(differing[:6]))
    leaves, treedef = jax.tree_util.tree_flatten(template)
    paths = _leaf_paths(template)
    expected = structure(template)
    saved = manifest["fingerprint"].get("structure", {})
    if saved != expected:
        diff = [f"{p}: checkpoint has {saved.get(p, 'nothing')}, expected {expected.get(p, 'nothing')}"
                for p in sorted(set(saved) | set(expected)) if saved.get(p) != expected.get(p)]
        raise CheckpointError(f"checkpoint {directory} holds other arrays: " + "; ".join(diff[:6]))
    try:
        state = _read_state(directory, 0, leaves)
    except Exception as error:  # noqa: BLE001
        raise CheckpointError(f"checkpoint {directory} is corrupt or unreadable ({type(error).__name__}: "
                              f"{error})") from error
    host = _verified_leaves(state, leaves, paths, manifest, directory)
    return jax.tree_util.tree_unflatten(treedef, host), manifest
