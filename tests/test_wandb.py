"""The W&B sink: which updates reach W&B (every n-th and the last, also when a budget ends the run
early), system stats and console capture only when asked for, and online mode without credentials
refused before compiling. (A sweep's offline W&B run: tests/test_sweep.py; rows surviving a kill:
tests/test_kill_and_resume.py.)"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from purejaxrl_opt.config.schema import ConfigError
from tests.conftest import TINY, compose


def _update_rows_once_written(out: Path, count: int, timeout: float = 60.0) -> list[dict]:
    """The history rows with an ``update`` of the one offline W&B log under ``out``, read again until
    ``count`` of them are on disk or ``timeout`` seconds pass: ``wandb.finish`` returns before W&B's
    service process has written its buffered records when the machine is loaded (seen once under
    pytest-xdist on 2 cores: the file there, no rows yet). Fewer rows after the wait fail the test."""
    from purejaxrl_opt.host.loggers import read_wandb_history

    def _rows() -> list[dict]:
        (log,) = out.glob("wandb/offline-run-*/run-*.wandb")
        return [r for r in read_wandb_history(log) if "update" in r]

    deadline = time.time() + timeout
    while time.time() < deadline:
        try:  # a record still being written can fail to parse: read again
            rows = _rows()
            if len(rows) >= count:
                return rows
        except Exception:  # noqa: BLE001 - the last read below raises it for real
            pass
        time.sleep(0.2)
    return _rows()


def test_wandb_logs_every_nth_update_and_the_last(tmp_path, monkeypatch):
    """``logger.every_updates=3``: the rows of updates 2, 5, 8 and the last (9) reach W&B, each with
    its own values; 0 (auto) logs every update of a run under 1000 updates (the sink is driven with
    a run's metrics directly: no training)."""
    from purejaxrl_opt.core import algos
    from purejaxrl_opt.host import loggers
    from purejaxrl_opt.core.algos.ppo import PPOConfig
    from tests.conftest import small_run

    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    run = small_run(PPOConfig(num_envs=4, num_steps=16), num_seeds=2, total_timesteps=4 * 16 * 10)
    algo = algos.make_algorithm(run)
    assert algo.num_updates == 10
    metrics = {"env_steps": np.tile(np.arange(1, 11, dtype=np.float64) * 64, (2, 1)),
               "return_mean": np.arange(20, dtype=np.float64).reshape(2, 10)}
    summary = {"final_return_mean": 1.0, "final_return_per_seed": [1.0, 1.0]}
    for every, expected in ((3, [2, 5, 8, 9]), (0, list(range(10)))):
        out = tmp_path / f"every{every}"
        sink = loggers.make_loggers({"kind": "wandb", "every_updates": every}, "off")[1]
        sink.start(run, algo, out)
        sink.compiled(1.0)
        sink.progress(metrics, 4, 10, 1.0)  # a chunk boundary between logged updates
        sink.finish(summary, metrics, out)
        rows = _update_rows_once_written(out, len(expected))
        assert [r["update"] for r in rows] == expected == [r["_step"] for r in rows]
        assert [r["seed_1/return_mean"] for r in rows] == [10.0 + u for u in expected]
    # a budget spent after update 6 (GRPO): NaN rows after it; update 6 is logged at the end whether
    # the last progress call came before it or after it
    spent = {name: np.where(np.arange(10) > 6, np.nan, values) for name, values in metrics.items()}
    for progress_at in (4, 8):
        out = tmp_path / f"spent{progress_at}"
        sink = loggers.make_loggers({"kind": "wandb", "every_updates": 3}, "off")[1]
        sink.start(run, algo, out)
        sink.compiled(1.0)
        sink.progress(spent, progress_at, 10, 1.0)
        sink.finish(summary, spent, out)
        assert [r["update"] for r in _update_rows_once_written(out, 3)] == [2, 5, 6]
    with pytest.raises(ConfigError, match="logger.every_updates"):
        loggers.make_loggers({"kind": "wandb", "every_updates": -1}, "off")


def test_wandb_system_stats_and_console_capture_are_opt_in():
    import wandb

    from purejaxrl_opt.host import loggers

    lean = loggers.make_loggers({"kind": "wandb"}, "off")[1]
    full = loggers.make_loggers({"kind": "wandb", "system_stats": True, "capture_console": True}, "off")[1]
    assert (lean.system_stats, lean.capture_console, full.system_stats, full.capture_console) == (
        False, False, True, True)
    settings = loggers._settings(wandb, lean.system_stats, lean.capture_console)
    assert settings.x_disable_stats and settings.console == "off"
    assert settings.x_transaction_log_flush_interval == loggers.WandB.FLUSH_SECONDS
    settings = loggers._settings(wandb, full.system_stats, full.capture_console)
    assert not settings.x_disable_stats and settings.console != "off"
    with pytest.raises(ConfigError, match="logger.system_stat"):
        loggers.make_loggers({"kind": "wandb", "system_stat": True}, "off")


def test_wandb_online_without_credentials(no_compile, tmp_path, monkeypatch):
    from purejaxrl_opt.host import loggers
    from purejaxrl_opt.train import run_from_config

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))
    with pytest.raises(ConfigError, match="needs W&B credentials"):
        run_from_config(compose(TINY + ["logger=wandb", "logger.mode=online"]), str(tmp_path / "run"))
    sinks = loggers.make_loggers({"kind": "wandb", "mode": "online", "offline_fallback": True}, "off")
    assert sinks[1].kwargs["mode"] == "offline"
