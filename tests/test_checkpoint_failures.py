"""A failure ends in seconds with nothing lost, and a run directory belongs to one run.

Through the real CLI on a tiny CartPole run (one compile, shared by every run here through XLA's
persistent cache) and real filesystem conditions: a file size limit (RLIMIT_FSIZE: a write past it
fails with EFBIG, as a full disk fails with ENOSPC), a checkpoint directory without write permission
(as root, the test drops the capabilities that bypass file permissions), a run dir under a regular
file; a run dir held by another process; a corrupt newest checkpoint.
"""

from __future__ import annotations

import csv
import ctypes
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

import purejaxrl_opt.train  # noqa: F401 - XLA flags of the CLI, set before JAX starts
from purejaxrl_opt.formats import checkpoint
from purejaxrl_opt.host import rundir
from tests import conftest
from tests.conftest import cli_environment as cli_env, compose

ROOT = Path(__file__).resolve().parents[1]
# 256 x 256 hidden kernels (262,144 bytes each, and as many again in each of Adam's two moments): the
# storage writes each array whole into one data file, however it packs the state into files, so a
# file size limit between every result file and 262,144 bytes always stops a checkpoint
RUN = ["env=CartPole-v1", "algo=ppo", "num_seeds=1", "total_timesteps=4096", "eval_episodes=2",
       "progress.mode=off", "network.hidden_sizes=[256,256]"]
EVERY = ["checkpoint.every_updates=2"]  # 8 updates: checkpoints 2, 4, 6, 8
LARGEST_ARRAY_BYTES = 256 * 256 * 4
FILE_SIZE_LIMIT = 120_000  # above every result file (the learning-curve PNG is ~37 KB), below any array


def cli(args: list[str], preexec_fn=None, timeout: int = 300) -> tuple[subprocess.CompletedProcess, float]:
    """The training CLI's process on ``args`` and its wall time in seconds."""
    start = time.time()
    done = conftest.cli(args, preexec_fn=preexec_fn, timeout=timeout)
    return done, time.time() - start


def file_size_limit(limit: int):
    """preexec_fn: writes past ``limit`` bytes into any one file fail (EFBIG)."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def _drop_permission_override() -> None:
    """preexec_fn: without CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER (dropped from the
    bounding set, so the exec'd process has none of them even as root), file modes bind."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2, 3):
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def permission_preexec(tmp_path: Path):
    """A preexec_fn under which a directory's mode 0o555 refuses writes (None as a non-root user), or
    skip when this machine cannot make it so."""
    preexec = _drop_permission_override if os.geteuid() == 0 else None
    probe = tmp_path / "probe"
    probe.mkdir()
    probe.chmod(0o555)
    try:
        done = subprocess.run(["/bin/sh", "-c", f"touch {probe}/x"], preexec_fn=preexec,
                              capture_output=True)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("cannot drop the capabilities that bypass file permissions")
    finally:
        probe.chmod(0o755)
    if done.returncode == 0:
        pytest.skip("file permissions do not bind here")
    return preexec


def leftovers(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir() if "orbax-checkpoint-tmp" in p.name)


def one_error_line(done: subprocess.CompletedProcess, start: str) -> str:
    """The process's single error line (no traceback, no orbax log) starting with ``start``."""
    output = done.stdout + done.stderr
    assert "Traceback" not in output and "ERROR:absl" not in output, output[-3000:]
    # XLA's own C++ log lines (glog format), e.g. when it loads a program from the persistent cache
    lines = [line for line in done.stderr.splitlines() if line.strip() and not re.match(r"[IWEF]\d{4} ", line)]
    assert len(lines) == 1 and lines[0].startswith(start), done.stderr[-3000:]
    return lines[0]


def snapshot(directory: Path) -> dict:
    return {str(p.relative_to(directory)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(directory.rglob("*"))}


# =====================================================================================================
@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run (checkpoints 2, 4, 6, 8); while it ran, its run dir was locked by it."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    process = subprocess.Popen([sys.executable, "-m", "purejaxrl_opt.train", *RUN, *EVERY,
                                f"hydra.run.dir={run_dir}"], env=cli_env(), cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    refused = None
    holder = f"pid {process.pid} "
    while process.poll() is None and refused is None:  # lock the dir while the run holds it
        # only once the run has named itself in the lock file (it writes its pid right after it
        # locks): a probe before that could take the lock first and make the run refuse its own dir
        try:
            held = (run_dir / rundir.LOCK_NAME).read_text().startswith(holder)
        except FileNotFoundError:
            held = False
        if held:
            try:
                rundir.lock(run_dir).release()
            except rundir.RunDirError as error:
                refused = str(error)
        time.sleep(0.01)
    stdout, stderr = process.communicate(timeout=300)
    # (XLA:CPU's persistent-cache loader can fill stderr with machine-feature warnings: not the reason)
    assert process.returncode == 0, "\n".join(
        line for line in stderr.splitlines() if "cpu_aot_loader" not in line)[-3000:]
    return run_dir, refused, process.pid


def copy_of(finished_dir: Path, to: Path, keep_steps: list[int]) -> Path:
    """``finished_dir`` as a run killed after the checkpoint of ``keep_steps[-1]``."""
    shutil.copytree(finished_dir, to)
    for step in checkpoint.available_steps(to):
        if step not in keep_steps:
            shutil.rmtree(to / "checkpoints" / str(step))
    for name in ("summary.json", "metrics.csv", "learning_curve.png"):
        (to / name).unlink()
    return to


def test_a_run_holds_its_dir_and_records_its_config(finished):
    run_dir, refused, pid = finished
    assert refused is not None and str(run_dir) in refused and f"pid {pid} " in refused
    assert "in use by another run" in refused
    assert not (run_dir / rundir.LOCK_NAME).exists()  # released (and removed) at the end
    record = run_dir / ".hydra"
    assert sorted(p.name for p in record.iterdir()) == ["config.yaml", "hydra.yaml", "overrides.yaml"]
    assert yaml.safe_load((record / "overrides.yaml").read_text()) == [
        *RUN, *EVERY]  # hydra.run.dir is Hydra's own override, not the task's
    config = yaml.safe_load((record / "config.yaml").read_text())
    assert config["num_seeds"] == 1 and config["checkpoint"]["every_updates"] == 2
    assert yaml.safe_load((record / "hydra.yaml").read_text())["hydra"]["run"]["dir"] == str(run_dir)
    assert not (run_dir / "train.log").exists()  # Hydra writes no log file


def test_a_final_checkpoint_that_cannot_be_written_keeps_the_results(finished, tmp_path):
    """Training finished, then the final checkpoint's data file runs into the file size limit:
    the process ends at once with one line, summary.json and metrics.csv (bitwise those of the run
    that could write it) are on disk, and no temporary directory is left."""
    reference, *_ = finished
    results = [p for p in reference.rglob("*") if p.is_file() and "checkpoints" not in p.parts]
    assert max(p.stat().st_size for p in results) < FILE_SIZE_LIMIT < LARGEST_ARRAY_BYTES / 2
    run_dir = tmp_path / "run"
    done, seconds = cli([*RUN, f"hydra.run.dir={run_dir}"], preexec_fn=file_size_limit(FILE_SIZE_LIMIT))
    ended = time.time()
    assert done.returncode == 1, done.stderr[-3000:]
    line = one_error_line(done, "purejaxrl_opt: checkpoint write failed: could not write the checkpoint "
                                "of update 8")
    assert "File too large" in line and "No earlier checkpoint exists" in line
    assert ended - (run_dir / "summary.json").stat().st_mtime < 10
    assert (run_dir / "metrics.csv").read_bytes() == (reference / "metrics.csv").read_bytes()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final_return_per_seed"] == json.loads((reference / "summary.json").read_text())[
        "final_return_per_seed"]
    assert checkpoint.available_steps(run_dir) == [] and leftovers(run_dir) == []
    print(f"final checkpoint failure: {seconds:.1f}s wall")


@pytest.mark.slow  # for the fast tier's time; the final checkpoint's write failure stays in it
def test_a_periodic_checkpoint_that_cannot_be_written_keeps_the_earlier_ones(finished, tmp_path):
    """Resumed from update 2, the checkpoint of update 4 runs into the file size limit: the process
    ends at once with one line; the checkpoint of update 2 is kept intact, no temporary directory is
    left, and metrics.csv holds the 4 updates done (bitwise the reference's first rows)."""
    reference, *_ = finished
    run_dir = copy_of(reference, tmp_path / "run", keep_steps=[2])
    before = snapshot(run_dir / "checkpoints")
    done, seconds = cli([*RUN, *EVERY, f"resume={run_dir}", f"hydra.run.dir={tmp_path / 'invocation'}"],
                        preexec_fn=file_size_limit(FILE_SIZE_LIMIT))
    ended = time.time()
    assert done.returncode == 1, done.stderr[-3000:]
    line = one_error_line(done, "purejaxrl_opt: checkpoint write failed: could not write the checkpoint "
                                "of update 4")
    assert "The earlier checkpoints [2] are kept" in line
    assert snapshot(run_dir / "checkpoints") == before and leftovers(run_dir) == []
    assert ended - (run_dir / "metrics.csv").stat().st_mtime < 10
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert rows == (reference / "metrics.csv").read_text().splitlines()[:1 + 4]
    assert not (run_dir / "summary.json").exists()
    assert not (tmp_path / "invocation").exists()  # the resume's own Hydra dir stayed empty: removed
    print(f"periodic checkpoint failure: {seconds:.1f}s wall")


def test_an_unwritable_checkpoint_dir_is_refused_before_compiling(finished, tmp_path):
    reference, *_ = finished
    preexec = permission_preexec(tmp_path)
    run_dir = copy_of(reference, tmp_path / "run", keep_steps=[2, 4])
    (run_dir / "checkpoints").chmod(0o555)
    try:
        before = snapshot(run_dir)
        done, seconds = cli([*RUN, *EVERY, f"resume={run_dir}"], preexec_fn=preexec)
        assert done.returncode == 2, done.stderr[-3000:]
        line = one_error_line(done, f"purejaxrl_opt: checkpoint error: cannot write checkpoints into "
                                    f"{run_dir / 'checkpoints'}: Permission denied")
        assert line and "compiled in" not in done.stdout
        assert snapshot(run_dir) == before
    finally:
        (run_dir / "checkpoints").chmod(0o755)
    print(f"unwritable checkpoint dir: {seconds:.1f}s wall")


def test_a_dir_in_use_is_refused_at_once_and_keeps_the_recorded_config(finished, tmp_path):
    """While another process holds the run dir, a run into it (whose config would not even write a
    checkpoint) is refused at once; the run dir, its recorded config included, is untouched. Once
    that process is killed, the dir is free again."""
    reference, *_ = finished
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from purejaxrl_opt.host import rundir; "
                               "rundir.lock(sys.argv[1]); print('locked', flush=True); time.sleep(600)",
                               str(run_dir)], env=cli_env(), cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = snapshot(run_dir)
        done, seconds = cli([*RUN, "seed=100", "checkpoint.final=false", f"hydra.run.dir={run_dir}"])
        assert done.returncode == 2, done.stderr[-3000:]
        line = one_error_line(done, f"purejaxrl_opt: the run directory {run_dir} is in use by another run "
                                    f"(pid {holder.pid} ")
        assert "nothing was written" in line and "compiled in" not in done.stdout
        assert snapshot(run_dir) == before
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    rundir.lock(run_dir).release()  # a killed holder leaves no lock behind
    print(f"run dir in use: {seconds:.1f}s wall")


def test_refusals_write_nothing(tmp_path):
    """A config error creates no run dir; a run dir under a regular file or in a directory without
    write permission is one line, not a traceback."""
    missing = tmp_path / "new" / "run"
    done, _ = cli([*RUN, "algo.num_minibatches=3", f"hydra.run.dir={missing}"])
    assert done.returncode == 2
    one_error_line(done, "purejaxrl_opt: configuration error: config key 'algo.num_minibatches'")
    assert not missing.exists() and not missing.parent.exists()

    (tmp_path / "a_file").write_text("")
    done, _ = cli([*RUN, f"hydra.run.dir={tmp_path / 'a_file' / 'run'}"])
    assert done.returncode == 2
    one_error_line(done, f"purejaxrl_opt: cannot create the run directory {tmp_path / 'a_file' / 'run'}: "
                         "Not a directory")

    preexec = permission_preexec(tmp_path)
    locked = tmp_path / "read_only"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        done, _ = cli([*RUN, f"hydra.run.dir={locked / 'run'}"], preexec_fn=preexec)
    finally:
        locked.chmod(0o755)
    assert done.returncode == 2
    one_error_line(done, f"purejaxrl_opt: cannot create the run directory {locked / 'run'}: "
                         "Permission denied")
    assert list(locked.iterdir()) == []


def test_resume_from_an_older_checkpoint_when_the_newest_is_corrupt(finished, tmp_path, capsys):
    """A corrupt newest checkpoint is refused with the way out (resume_step=N); resuming from update 6
    removes the corrupt one, writes it again and ends bitwise equal to the uninterrupted run. Resumed
    once more, the finished run trains nothing and keeps its timing. (In this process: the CLI's
    compiled programs come from XLA's persistent cache.)"""
    from purejaxrl_opt.config.schema import ConfigError
    from purejaxrl_opt.train import run_from_config

    reference, *_ = finished
    run_dir = copy_of(reference, tmp_path / "run", keep_steps=[2, 4, 6, 8])
    data = max((p for p in (run_dir / "checkpoints" / "8" / "state").rglob("*") if p.is_file()),
               key=lambda p: p.stat().st_size)
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    resume = [*RUN, *EVERY, f"resume={run_dir}"]
    before = snapshot(run_dir)
    with pytest.raises(checkpoint.CorruptCheckpointError) as error:
        run_from_config(compose(resume), str(tmp_path / "unused"))
    assert f"checkpoint {run_dir / 'checkpoints' / '8'} is corrupt" in str(error.value)
    assert "Resume from an older checkpoint with resume_step=N (N one of [2, 4, 6])" in str(error.value)
    assert snapshot(run_dir) == before
    with pytest.raises(ConfigError, match=r"'resume_step' = 5 is invalid: .* holds the checkpoints of "
                                          r"updates \[2, 4, 6, 8\]"):
        run_from_config(compose([*resume, "resume_step=5"]), str(tmp_path / "unused"))
    with pytest.raises(ConfigError, match="'resume_step' = 6 is invalid: must be null unless resume"):
        run_from_config(compose([*RUN, "resume_step=6"]), str(tmp_path / "unused"))

    capsys.readouterr()
    resumed = run_from_config(compose([*resume, "resume_step=6"]), str(tmp_path / "unused")).summary
    stdout = capsys.readouterr().out
    assert "removed the checkpoints [8] after update 6" in stdout
    assert "resuming from the checkpoint at update 6" in stdout
    assert (run_dir / "metrics.csv").read_bytes() == (reference / "metrics.csv").read_bytes()
    assert checkpoint.available_steps(run_dir) == [2, 4, 6, 8]
    assert checkpoint.read_manifest(run_dir)[1]["digests"] == checkpoint.read_manifest(reference)[1]["digests"]
    assert resumed["resumed_from_update"] == 6 and "reevaluated" not in resumed

    again = run_from_config(compose(resume), str(tmp_path / "unused")).summary
    assert again["reevaluated"] is True and again["resumed_from_update"] == 8
    for key in ("compile_seconds", "run_seconds", "env_steps_per_second"):
        assert again[key] == resumed[key] and resumed[key] > 0
    assert again["final_return_per_seed"] == resumed["final_return_per_seed"]
    assert json.loads((run_dir / "summary.json").read_text()) == json.loads(json.dumps(again))
    assert not (tmp_path / "unused").exists()


# =====================================================================================================
def test_zero_size_arrays_are_checkpointed(tmp_path):
    """Leaves with no elements (MJX states carry some, e.g. data.act (n, 32, 0)) are saved in the
    manifest only and restored empty with their shape and dtype; the others bitwise."""
    import jax
    import jax.numpy as jnp

    tree = {"qpos": jnp.arange(6.0).reshape(2, 3), "act": jnp.zeros((2, 32, 0)),
            "contact": {"dist": jnp.zeros((2, 0), jnp.float32), "geom": jnp.zeros((0, 2), jnp.int32)},
            "key": jnp.array([[1, 2], [3, 4]], jnp.uint32)}
    shape = jax.eval_shape(lambda: tree)
    paths = checkpoint._leaf_paths(shape)
    fingerprint = {"config": {}, "sweep": None, "structure": {
        p: [list(leaf.shape), str(leaf.dtype)] for p, leaf in zip(paths, jax.tree_util.tree_leaves(shape))}}
    saver = checkpoint.Checkpointer(tmp_path, fingerprint)
    saver.save(tree, 3)
    saver.close()
    restored, step = checkpoint.restore(tmp_path, fingerprint, shape)
    assert step == 3
    for a, b in zip(jax.tree_util.tree_leaves(tree), jax.tree_util.tree_leaves(restored)):
        assert a.shape == b.shape and a.dtype == b.dtype and np.array_equal(np.asarray(a), b)
    stored = checkpoint.read_manifest(tmp_path)[1]
    assert set(stored["digests"]) == set(paths)
    checkpoint.save_tree(tmp_path / "tree", tree, {})
    back, _ = checkpoint.restore_tree(tmp_path / "tree", shape)
    assert back["act"].shape == (2, 32, 0) and back["contact"]["geom"].dtype == np.int32
    np.testing.assert_array_equal(back["qpos"], np.asarray(tree["qpos"]))


def test_checkpoints_are_named_by_the_update_reached(tmp_path):
    """GRPO on Catch: every episode lasts 9 steps, so the budget of 1000 real steps ends after 28
    updates, inside the progress chunk 16..32 (chunks double with a budget): the final checkpoint is
    named 28, and it holds update counters of 28."""
    from purejaxrl_opt.host import runner
    from purejaxrl_opt.config.schema import EnvConfig, RunConfig
    from purejaxrl_opt.core.algos.grpo import GRPOConfig

    run = RunConfig(algo=GRPOConfig(num_groups=2, group_size=2, num_minibatches=2),
                    env=EnvConfig(id="Catch-bsuite"), total_timesteps=1000, num_seeds=1, eval_episodes=1)
    run.validate()
    result = runner.execute(run, tmp_path, loggers=(), num_chunks=4,
                            checkpoints=checkpoint.CheckpointConfig(every_updates=0, final=True))
    assert result.summary["num_updates"] == 28 and result.summary["max_updates"] == 250
    assert checkpoint.available_steps(tmp_path) == [28]
    assert checkpoint.read_manifest(tmp_path)[1]["update_idx"] == 28
