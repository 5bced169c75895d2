"""A run directory belongs to one run.

* :func:`lock` -- an exclusive ``fcntl.flock`` on ``RUN_DIR/.purejaxrl_opt.lock`` for as long as a run
  writes into the directory: a second run into it is refused at once, naming the directory and the
  process that holds it. The operating system releases the lock when its process dies (SIGKILL
  included), so a killed run never leaves the directory stuck.
* :func:`write_hydra_record` -- the run's recorded config (``.hydra/config.yaml``, ``hydra.yaml``,
  ``overrides.yaml``, what Hydra itself would write), written by the training CLI only once the run has
  been validated and holds the lock (``conf/config.yaml`` sets ``hydra.output_subdir: null``, so Hydra
  writes nothing): a refused run leaves the recorded config of the run already there untouched.
* :class:`RunDirCallback` -- a Hydra callback that creates the run (or sweep) directory before Hydra
  does, so that a directory that cannot be created is one clear line, not a traceback, and that
  remembers which directories this process created: :func:`discard_if_empty` removes such a directory
  again when a refused run leaves it empty.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path
from typing import Any

LOCK_NAME = ".purejaxrl_opt.lock"
RECORD_DIR = ".hydra"

# directories this process created for its run (the run dir) or sweep (the sweep dir)
_created: set[Path] = set()


class RunDirError(OSError):
    """A run directory that is in use by another run, or that cannot be created or written."""


def _reason(error: OSError) -> str:
    return error.strerror or str(error) or type(error).__name__


def create(path: str | os.PathLike, what: str = "run directory") -> Path:
    """``path`` made (with its parents), remembering the directories this call created; RunDirError
    if it cannot be."""
    path = Path(path).absolute()
    missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise RunDirError(f"cannot create the {what} {path}: a file (not a directory) is in the "
                          "way") from None
    except OSError as error:
        raise RunDirError(f"cannot create the {what} {path}: {_reason(error)}") from None
    _created.update(missing)
    return path


def created_here(path: str | os.PathLike) -> bool:
    """Whether this process created ``path`` (or a directory above it: a sweep dir) for its run."""
    path = Path(path).absolute()
    return any(p in _created for p in (path, *path.parents))


def discard_if_empty(path: str | os.PathLike) -> None:
    """Remove ``path`` when this process created it and it is (still) empty, and then each parent
    this process created that is left empty."""
    path = Path(path).absolute()
    if not created_here(path):
        return
    while True:
        try:
            path.rmdir()  # only an empty directory
        except OSError:
            return
        _created.discard(path)
        path = path.parent
        if path not in _created:
            return


class RunDirLock:
    """The lock of one run directory (:func:`lock`); ``release`` once the run is done with it."""

    def __init__(self, directory: Path, fd: int):
        self.directory, self._fd = directory, fd

    def release(self) -> None:
        if self._fd is None:
            return
        try:  # removed while still held: a process that opened the old file retries (see lock())
            (self.directory / LOCK_NAME).unlink()
        except OSError:
            pass
        os.close(self._fd)  # releases the flock
        self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.release()


def lock(run_dir: str | os.PathLike) -> RunDirLock:
    """Take ``run_dir`` for this run (created if missing); RunDirError at once when another live
    process holds it or it cannot be written."""
    directory = create(run_dir)
    path = directory / LOCK_NAME
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise RunDirError(f"cannot write into the run directory {directory}: {_reason(error)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            # the holder writes its pid right after it locks: give it that moment to name itself
            holder, deadline = "", time.monotonic() + 0.5
            while not holder and time.monotonic() < deadline:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
                if not holder:
                    time.sleep(0.01)
            os.close(fd)
            raise RunDirError(
                f"the run directory {directory} is in use by another run"
                + (f" ({holder})" if holder else "")
                + ": wait for it to end, or choose another directory (hydra.run.dir=...); "
                "nothing was written") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # its holder removed the file between our open and our lock: take the new one
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    return RunDirLock(directory, fd)


def write_hydra_record(out_dir: str | os.PathLike, cfg: Any) -> None:
    """``out_dir/.hydra/{config,hydra,overrides}.yaml`` of this Hydra job, as Hydra writes them
    (``cfg``: the job's config, without the ``hydra`` node); nothing outside a Hydra app."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    if not HydraConfig.initialized():
        return
    hydra_cfg = HydraConfig.instance().cfg  # {"hydra": ...}
    record = Path(out_dir) / RECORD_DIR
    record.mkdir(parents=True, exist_ok=True)
    for name, node in (("config.yaml", cfg), ("hydra.yaml", hydra_cfg),
                       ("overrides.yaml", hydra_cfg.hydra.overrides.task)):
        (record / name).write_text(OmegaConf.to_yaml(node), encoding="utf-8")


try:
    from hydra.experimental.callback import Callback as _Callback
except ImportError:  # pragma: no cover - Hydra is a dependency of the CLIs, not of this module
    _Callback = object


class RunDirCallback(_Callback):
    """Creates the run dir (``hydra.run.dir``) or the sweep dir (``hydra.sweep.dir``) before Hydra
    does: a directory that cannot be created ends the process with one line (exit status 2)."""

    def on_run_start(self, config, **kwargs) -> None:
        self._create(config, "hydra.run.dir", "run directory")

    def on_multirun_start(self, config, **kwargs) -> None:
        self._create(config, "hydra.sweep.dir", "sweep directory")

    @staticmethod
    def _create(config, key: str, what: str) -> None:
        import sys

        from omegaconf import OmegaConf

        try:
            path = OmegaConf.select(config, key)
        except Exception:  # noqa: BLE001 - an interpolation only Hydra can resolve yet: Hydra creates it
            return
        if path is None:
            return
        try:
            create(str(path), what)
        except RunDirError as error:
            print(f"purejaxrl_opt: {error}", file=sys.stderr)
            sys.exit(2)
