"""Progress bars (purejaxrl_opt/host/progress.py and the console sink): on a real pseudo-terminal a job
prints a bar with the steps done of the total, the rate and the time left; to a pipe it prints no bar
at all. The fast tests drive the bars from a tiny child process (no JAX compile); the slow ones run
the training and SFT command lines on a pseudo-terminal. The chunks a run is trained in end on every
checkpoint and resume point; the console sink's bar and lines are fed a run's metrics directly.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
# tqdm's meter: "<done>/<total> <unit> [<elapsed><<left>, <rate> <unit>/s" (elapsed and left as mm:ss)
METER = r"(\d+(\.\d+)?k?)/(\d+(\.\d+)?k?) {unit} \[\d\d:\d\d<\d\d:\d\d, \d+(\.\d+)?k? {unit}/s"


def run_in_terminal(args: list[str], env: dict | None = None, timeout: float = 120) -> str:
    """Run ``args`` with stdout and stderr on a new pseudo-terminal (120 columns); its output."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=ROOT,
                               env=env, close_fds=True)
    os.close(slave)
    chunks = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
        process.wait(timeout)
    assert process.returncode == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    return b"".join(chunks).decode(errors="replace")


def run_in_pipe(args: list[str], env: dict | None = None, timeout: float = 120) -> str:
    done = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


# a job of 6 reports, 0.1 s apart: a Bar (the SFT / suite / rendering bar) and the training console
CHILD = textwrap.dedent("""
    import time
    import numpy as np
    from purejaxrl_opt.host.loggers import Console
    from purejaxrl_opt.host.progress import Bar, write

    with Bar(600, unit="steps", desc="job") as bar:
        for i in range(1, 7):
            time.sleep(0.1)
            bar.update_to(100 * i, postfix=f"loss {1.0 / i:.3f}")
    write("a line between bars")
    console = Console("auto")
    console.compiled(1.0)
    steps = np.cumsum(np.full((2, 6), 512.0), axis=1)
    for done in range(1, 7):
        time.sleep(0.1)
        console.progress({"env_steps": steps, "return_mean": np.full((2, 6), 20.0)}, done, 6, 0.1 * done)
""")


def test_a_terminal_gets_bars_with_steps_rate_and_time_left():
    out = run_in_terminal([sys.executable, "-c", CHILD])
    assert re.search(r"job: 100%\|[^|]+\| " + METER.format(unit="steps") + r", loss 0\.167\]", out), out
    assert "\r" in out and "a line between bars" in out
    # the training bar: env steps of both lanes (6 updates x 512 x 2 = 6.14k), then update and return
    assert re.search(METER.format(unit="env steps"), out), out
    assert "6.14k/6.14k env steps" in out and "update 6/6, return 20.00" in out
    assert re.search(r"update 3/6", out) and "50%" in out


def test_a_pipe_gets_no_bar():
    out = run_in_pipe([sys.executable, "-c", CHILD])
    assert "\r" not in out and "steps/s" not in out and "%|" not in out
    # only the plain lines: the console's (a short run prints no progress lines) and the job's own
    assert out == "a line between bars\n[purejaxrl_opt] compiled in 1.0s\n"


def test_a_disabled_bar_is_a_no_op():
    import io

    from purejaxrl_opt.host.progress import Bar, is_terminal

    stream = io.StringIO()
    assert not is_terminal(stream) and not is_terminal(object())
    with Bar(10, stream=stream) as bar:
        bar.update_to(5, postfix="x")
        bar.add_initial(2)
    assert stream.getvalue() == "" and not bar.enabled


def test_programs_compiled_alongside_compute_what_jit_computes_and_errors_reach_the_caller():
    """compile_chunked compiles init, advance and the extra programs on worker threads while the next
    is lowered: each compiled program gives what ``jax.jit`` of the same function gives, and an error
    in lowering an extra program, or in compiling one, is raised in the caller (no hang)."""
    import threading

    import jax
    import jax.numpy as jnp
    import numpy as np

    from purejaxrl_opt.host.chunks import Compiler, compile_chunked, run_chunks

    def init(x):
        return {"x": x, "sum": jnp.zeros(())}

    def advance(carry, start, stop):
        def body(i, c):
            return {"x": jnp.sin(c["x"]) * 1.5 + i, "sum": c["sum"] + c["x"].sum()}
        return jax.lax.fori_loop(start, stop, body, carry)

    def readout(carry):
        return carry["x"].sum() * 2.0 + carry["sum"]

    x = jnp.linspace(-1.0, 1.0, 7)
    threads_before = threading.active_count()
    init_c, advance_c, shape, readout_c = compile_chunked(init, advance, x, extra=(jax.jit(readout).lower,))
    assert jax.tree_util.tree_map(lambda s: (s.shape, s.dtype), shape) == {
        "x": ((7,), jnp.float32), "sum": ((), jnp.float32)}
    carry, _ = run_chunks(advance_c, init_c(x), [3, 5])
    expected = jax.jit(advance)(jax.jit(init)(x), 0, 5)
    for a, b in zip(jax.tree_util.tree_leaves(carry), jax.tree_util.tree_leaves(expected)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert np.asarray(readout_c(carry)).tobytes() == np.asarray(jax.jit(readout)(expected)).tobytes()
    assert threading.active_count() == threads_before  # the compile threads are gone

    def broken(shape):
        raise ValueError("cannot lower this")

    with pytest.raises(ValueError, match="cannot lower this"):
        compile_chunked(init, advance, x, extra=(broken,))

    class FailingCompile:  # a Lowered whose compile fails (with or without compile options)
        def compile(self, compiler_options=None):
            raise RuntimeError("compile failed")

    with pytest.raises(RuntimeError, match="compile failed"):
        with Compiler() as compiler:
            compiler.submit(FailingCompile()).result()


@pytest.mark.slow  # a transformer's training and greedy decoding compile: a minute on 2 loaded cores
def test_sft_in_blocks_is_bitwise_one_call():
    """SFT's progress splits training into calls of one compiled ``blocks`` program: the parameters
    and metrics are bitwise those of a single call."""
    import jax
    import numpy as np

    from purejaxrl_opt import envs
    from purejaxrl_opt.config.schema import EnvConfig, NetworkConfig
    from purejaxrl_opt.core.algos.sft import SFTConfig, make_sft_train
    from purejaxrl_opt.core.models.policies import make_policy
    from purejaxrl_opt.host.chunks import chunk_stops, compile_chunked, run_chunks
    from purejaxrl_opt.host.sft import make_dataset

    net = NetworkConfig(kind="transformer", d_model=16, num_layers=1, num_heads=2, mlp_ratio=2)
    env_cfg = EnvConfig(id="Addition-v0", params={"min_digits": 1, "max_digits": 1})
    cfg = SFTConfig(num_examples=16, steps=30, batch_size=8, eval_prompts=8)
    policy = make_policy(envs.make(env_cfg.id, dict(env_cfg.params))[2], net)
    init, blocks = make_sft_train(policy, *make_dataset(env_cfg, cfg, 0), cfg, log_every=10)
    key = jax.random.PRNGKey(0)
    init, blocks, _ = compile_chunked(init, blocks, key)
    reports = []
    one, _ = run_chunks(blocks, init(key), chunk_stops(3, 1))
    three, _ = run_chunks(blocks, init(key), chunk_stops(3, 3),
                          after=lambda carry, done, last: reports.append((done, last)))
    assert reports == [(1, False), (2, False), (3, True)]
    for a, b in zip(jax.tree_util.tree_leaves(one), jax.tree_util.tree_leaves(three)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert np.isfinite(np.asarray(one[3]["loss"])).all()  # every block wrote its row


# ------------------------------------------------------------------------------- the command lines
# (cli_env: tests/conftest.py)
@pytest.mark.slow
def test_training_cli_on_a_terminal_and_in_a_pipe(cli_env, tmp_path):
    args = [sys.executable, "-m", "purejaxrl_opt.train", "env=CartPole-v1", "algo=ppo", "num_seeds=2",
            "total_timesteps=20480", "eval_episodes=2", "progress.chunks=5", "checkpoint.final=false"]
    out = run_in_terminal(args + [f"hydra.run.dir={tmp_path / 'tty'}"], cli_env, timeout=600)
    assert re.search(r"ppo CartPole-v1: 100%\|[^|]+\| " + METER.format(unit="env steps"), out), out
    assert "40.96k/40.96k env steps" in out or "41.0k/41.0k env steps" in out, out
    piped = run_in_pipe(args + [f"hydra.run.dir={tmp_path / 'pipe'}"], cli_env, timeout=600)
    assert "\r" not in piped and "%|" not in piped and "final return" in piped


@pytest.mark.slow
def test_sft_cli_on_a_terminal_and_in_a_pipe(cli_env, tmp_path):
    args = [sys.executable, "-m", "purejaxrl_opt.sft", "env=Addition-v0", "env.params.min_digits=1",
            "env.params.max_digits=1", "network.d_model=16", "network.num_layers=1", "sft.num_examples=16",
            "sft.steps=100", "sft.batch_size=8", "sft.eval_prompts=8"]
    out = run_in_terminal(args + [f"hydra.run.dir={tmp_path / 'tty'}"], cli_env, timeout=600)
    assert re.search(r"sft Addition-v0: 100%\|[^|]+\| 100/100 steps \[\d\d:\d\d<\d\d:\d\d, "
                     r"\d+(\.\d+)? steps/s, loss \d\.\d{4}\]", out), out
    piped = run_in_pipe(args + [f"hydra.run.dir={tmp_path / 'pipe'}"], cli_env, timeout=600)
    assert "\r" not in piped and "steps/s" not in piped and "held-out greedy accuracy" in piped


# ------------------------------------------------------------------------------- chunks and the console sink
def test_chunks_end_on_every_checkpoint_and_resume_point():
    from purejaxrl_opt.host.chunks import chunk_sizes, chunk_stops

    assert chunk_stops(39, 1) == [39]
    assert chunk_stops(39, 10) == list(np.cumsum(chunk_sizes(39, 10)))
    stops = chunk_stops(39, 4, checkpoint_every=5)
    assert {5, 10, 15, 20, 25, 30, 35, 39} <= set(stops) and {10, 20, 30} <= set(stops)
    assert chunk_stops(39, 4, checkpoint_every=5, start=25) == [s for s in stops if s > 25]
    assert chunk_stops(39, 4, start=39) == []


def test_chunks_of_a_blocked_update_loop_end_on_whole_blocks():
    """With an update loop that tests its budget once per block of k updates (GRPO's check_every), a
    progress chunk ending mid-block would compute the rest of the block masked: every chunk but the
    last and those ending on a checkpoint is a whole number of blocks, from a resume point too."""
    from purejaxrl_opt.host.runner import chunk_stops

    for start, every in ((0, 0), (0, 25), (5, 0), (30, 25)):
        stops = chunk_stops(100, 10, checkpoint_every=every, start=start, doubling=True, align=16)
        fixed = {100} | (set(range(every, 100, every)) if every else set())
        assert stops == sorted(set(stops)) and stops[-1] == 100 and fixed & set(range(start + 1, 101)) <= set(stops)
        for begin, end in zip([start] + stops, stops):
            assert end in fixed or (end - begin) % 16 == 0, (start, every, begin, end)
        assert len(stops) >= 100 // 16 - start // 16
    assert chunk_stops(100, 10, doubling=True, align=16) == [16, 32, 48, 64, 80, 96, 100]
    assert chunk_stops(100, 10, align=1) == chunk_stops(100, 10)


def test_console_progress_bar_and_lines():
    import io

    from purejaxrl_opt.host.loggers import Console

    metrics = {"env_steps": np.array([[512.0, 1024, np.nan, np.nan]] * 2),
               "return_mean": np.array([[10.0, 20.0, np.nan, np.nan]] * 2)}

    class TTY(io.StringIO):
        def isatty(self):
            return True

    bar, lines = TTY(), io.StringIO()
    Console("auto", bar).progress(metrics, 2, 4, 0.5)
    Console("auto", lines, line_every_seconds=0).progress(metrics, 2, 4, 0.5)
    quiet = io.StringIO()  # a short run prints no progress lines at all
    Console("auto", quiet).progress(metrics, 2, 4, 0.5)
    assert quiet.getvalue() == ""
    # the bar (tqdm): env steps of every lane done of the total, then the update and the return
    assert bar.getvalue().startswith("\r") and "50%" in bar.getvalue()
    assert "2.05k/4.10k env steps" in bar.getvalue() and "update 2/4, return 15.00" in bar.getvalue()
    assert lines.getvalue().startswith("[purejaxrl_opt] update 2/4  return 15.00  4,096 steps/s  eta 0s")
    resumed = io.StringIO()  # a resumed run's rate counts only this process's steps
    Console("lines", resumed, line_every_seconds=0).progress(metrics, 2, 4, 0.5, start_update=1)
    assert "2,048 steps/s" in resumed.getvalue()
