"""experiments/throughput_one_agent.py's summary: a side's seeds, each counted once however often it ran,
their mean / IQM with CIs, and the probability that a seed of ours beats one of theirs, by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import throughput_one_agent  # noqa: E402


def _row(side, seed, ret, rate, repeat=0):
    return {"side": side, "seed": seed, "repeat": repeat, "quiet": True, "env_steps_per_s": rate,
            "compile_s": 5.0, "final_return": ret, "eval_return": ret}


def test_returns_per_seed_and_the_probability_of_improvement_by_hand():
    ours = {1: 11.0, 2: 21.0, 3: 31.0, 4: 41.0}
    theirs = {1: 10.0, 2: 20.0, 3: 30.0, 4: 40.0}
    rows = [_row("ours", s, r, 200.0 + s, repeat) for repeat in range(2) for s, r in ours.items()]
    rows += [_row("purejaxrl", s, r, 100.0) for s, r in theirs.items()]
    summary = throughput_one_agent.summarise(rows)
    assert summary["ours"]["final_returns"] == {str(s): r for s, r in ours.items()}  # repeats counted once
    assert summary["ours"]["final_return"] == pytest.approx(26.0)
    assert summary["ours"]["repeats"] == 8 and summary["purejaxrl"]["repeats"] == 4
    # pairs (ours, theirs) with ours higher: 1 + 2 + 3 + 4 of 16
    assert summary["probability_ours_higher"]["value"] == pytest.approx(10 / 16)
    assert summary["speed_ratio"] == pytest.approx(202.5 / 100.0)  # medians of 201..204 (twice) and 100
    iqm = summary["purejaxrl"]["final_return_iqm_ci"]
    assert iqm["value"] == pytest.approx(25.0) and iqm["low"] <= 25.0 <= iqm["high"]
    text = throughput_one_agent.markdown({"machine_text": "m", "seeds": [1, 2, 3, 4], "repeats": 2, "max_load": 1.5,
                                          "summary": {"case": summary}, "load_avg_before": [0.0],
                                          "load_avg_after": [0.0]})
    assert "seeds 1-4" in text and "| 0.62 [" in text and "- case: 11.0, 21.0, 31.0, 41.0; 10.0, 20.0" in text
