"""One agent, ours vs PureJaxRL's own ``ppo.py``, on this CPU: env steps/s, compile s and final return
per side, each measurement its own process, the two sides interleaved (A B A B ...).

    python experiments/throughput_one_agent.py --checkout experiments/peers/purejaxrl --seeds 2108 2109 2110 2111

Cases (``--cases``, default all), each the same config on both sides, on the same seeds (``--seeds``;
each seed is one process a side, ``--repeats`` times):

* ``cartpole_4``, ``cartpole_64``, ``cartpole_512``: PureJaxRL's CartPole config (``ppo.py``'s own:
  128 steps, 5e5 env steps, 4 epochs x 4 minibatches, lr 2.5e-4 annealed, tanh 64x64) at 4, 64 and 512
  envs; ours is ``python -m purejaxrl_opt.train num_seeds=1 algo.num_envs=N`` (PPO's defaults are that
  config);
* ``minatar``: PureJaxRL's MinAtar config (examples/brax_minatar.ipynb: 64 envs x 128 steps, 4 epochs x
  8 minibatches, lr 5e-3 annealed, relu) on Breakout-MinAtar with ``--minatar-steps`` env steps. Its
  network is ``ppo.py``'s 64x64 MLP on the flattened image (PureJaxRL has no conv torso), so ours runs
  the same network (``network.cnn_channels=[] network.hidden_sizes=[64,64]``) and every PPO key of
  that config set explicitly over conf/tuned/ppo_Breakout-MinAtar.yaml.

Each side as its user runs it: ours through the training CLI (its XLA:CPU defaults,
purejaxrl_opt/host/xla_flags.py; ``summary.json``'s ``compile_seconds`` is the ahead-of-time compile
of init, the chunked updates and the final evaluation, ``run_seconds`` init and every update with the
progress reads between chunks, ended by ``block_until_ready``), theirs through
experiments/peer_purejaxrl.py (``jax.jit(train).lower(key).compile()``, then the compiled call with
``block_until_ready``; plain JAX, no flags). Final return, both sides: the mean return of the
episodes that ended in the last 5% of updates (ours: ``return_mean`` weighted by ``episodes`` in
``metrics.csv``; theirs: ``returned_episode_returns`` where ``returned_episode``); ours also reports
its deterministic 16-episode evaluation.

Seeds: PureJaxRL's key is ``jax.random.PRNGKey(seed)``, ours ``seed=<seed>``; the two sides' runs of one
seed are different draws (different key uses), so returns are compared as distributions over the seeds:
mean and IQM with 95% bootstrap CIs (purejaxrl_opt/host/stats.py) and the probability that a seed of
ours beats a seed of theirs. Env steps/s: the median over all of a side's processes (every seed and
repeat; the rate does not depend on the seed beyond noise).

On a shared machine a timing counts only when the 1-minute load average was below ``--max-load``
when it started: each measurement waits (up to ``--wait-s``) for that, and records the load before
and after. Writes ``--out``/results.json and results.md (commit and command: experiments/provenance.py).
The benchmark suites (conf/benchmark/*.yaml) compare final returns over seeds with one training per
entry, in-process; they have no interleaved repeats or load gating, hence this script.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import provenance
from peer_purejaxrl import CONFIGS, LAST_FRACTION, ppo_file

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
CASES = ("cartpole_4", "cartpole_64", "cartpole_512", "minatar")


def case_setup(case: str, minatar_steps: int) -> tuple[list[str], list[str]]:
    """``(our CLI overrides, peer runner arguments)`` of ``case``."""
    if case.startswith("cartpole_"):
        num_envs = int(case.split("_")[1])
        return ([f"algo.num_envs={num_envs}"], ["--config", "cartpole", "--num-envs", str(num_envs)])
    if case == "minatar":
        c = CONFIGS["minatar"]
        ours = ["env=Breakout-MinAtar", f"total_timesteps={minatar_steps}", f"algo.num_envs={c['NUM_ENVS']}",
                f"algo.num_steps={c['NUM_STEPS']}", f"algo.update_epochs={c['UPDATE_EPOCHS']}",
                f"algo.num_minibatches={c['NUM_MINIBATCHES']}", f"algo.lr={c['LR']}", "algo.anneal_lr=true",
                f"algo.gamma={c['GAMMA']}", f"algo.gae_lambda={c['GAE_LAMBDA']}", f"algo.clip_eps={c['CLIP_EPS']}",
                "algo.clip_value=true", "algo.normalize_advantages=true", f"algo.ent_coef={c['ENT_COEF']}",
                f"algo.vf_coef={c['VF_COEF']}", f"algo.max_grad_norm={c['MAX_GRAD_NORM']}",
                "network.hidden_sizes=[64,64]", f"network.activation={c['ACTIVATION']}", "network.cnn_channels=[]"]
        return ours, ["--config", "minatar", "--total-timesteps", str(minatar_steps)]
    raise SystemExit(f"--cases: unknown case {case!r}; allowed {list(CASES)}")


def wait_for_quiet(max_load: float, wait_s: float) -> tuple[list[float], bool]:
    """Wait until the 1-minute load average is below ``max_load`` (at most ``wait_s`` seconds):
    ``(load average, whether it was below)``."""
    deadline = time.time() + wait_s
    while True:
        load = provenance.load_average()
        if load[0] < max_load or time.time() >= deadline:
            return load, load[0] < max_load
        time.sleep(10)


def our_final_return(metrics_csv: Path) -> tuple[float, int]:
    """``(mean return, episodes)`` of the episodes that ended in the last 5% of updates (one lane)."""
    rows = list(csv.DictReader(metrics_csv.open()))
    last = max(1, int(round(len(rows) * LAST_FRACTION)))
    total = count = 0.0
    for row in rows[-last:]:
        episodes = float(row["episodes"])
        if episodes > 0:
            total += float(row["return_mean"]) * episodes
            count += episodes
    return (total / count if count else float("nan")), int(count)


def run_ours(overrides: list[str], work: Path, seed: int, env: dict | None = None) -> dict:
    """One training CLI process (``env``: more environment variables); its timings and returns."""
    out = work / "ours"
    cmd = [PYTHON, "-m", "purejaxrl_opt.train", "num_seeds=1", f"seed={seed}", "checkpoint.final=false",
           f"hydra.run.dir={out}", *overrides]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(f"ours failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    ret, episodes = our_final_return(out / "metrics.csv")
    return {"env_steps_per_s": summary["env_steps_per_second"], "compile_s": summary["compile_seconds"],
            "run_s": summary["run_seconds"], "env_steps": summary["env_steps"], "final_return": ret,
            "final_return_episodes": episodes, "eval_return": summary["final_return_mean"],
            "command": "python " + " ".join(cmd[1:])}


def run_peer(args_peer: list[str], checkout: str, work: Path, seed: int) -> dict:
    out = work / "peer.json"
    cmd = [PYTHON, str(ROOT / "experiments" / "peer_purejaxrl.py"), "--checkout", checkout, "--seed", str(seed),
           "--json", str(out), *args_peer]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800,
                          env={k: v for k, v in os.environ.items() if k != "XLA_FLAGS"})
    if proc.returncode != 0:
        raise RuntimeError(f"purejaxrl failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
    record = json.loads(out.read_text())
    return {key: record[key] for key in ("env_steps_per_s", "compile_s", "run_s", "env_steps", "final_return",
                                         "final_return_episodes")} | {
        "command": "python " + " ".join(cmd[1:])}


def per_seed(rows: list[dict], key: str) -> dict[int, float]:
    """``{seed: median of key over that seed's repeats}`` (a seed's repeats train the same numbers)."""
    seeds = sorted({m["seed"] for m in rows})
    return {seed: statistics.median(m[key] for m in rows if m["seed"] == seed) for seed in seeds}


def summarise(measurements: list[dict]) -> dict:
    """Medians of each side's timings (all processes, and those that started quiet) and the ratios; each
    side's final returns per seed, their mean and IQM with 95% bootstrap CIs, and the probability that
    a seed of ours ends above a seed of theirs (ties one half)."""
    from purejaxrl_opt.host.stats import probability_of_improvement_ci, stratified_bootstrap_ci

    out = {}
    for side in ("ours", "purejaxrl"):
        rows = [m for m in measurements if m["side"] == side]
        quiet = [m for m in rows if m["quiet"]]
        use = quiet or rows
        returns = per_seed(rows, "final_return")
        values = list(returns.values())
        out[side] = {"repeats": len(rows), "quiet_repeats": len(quiet),
                     "env_steps_per_s": statistics.median(m["env_steps_per_s"] for m in use),
                     "compile_s": statistics.median(m["compile_s"] for m in use),
                     "final_returns": {str(seed): value for seed, value in returns.items()},
                     "final_return": statistics.fmean(values),
                     "final_return_mean_ci": asdict(stratified_bootstrap_ci(values, "mean")),
                     "final_return_iqm_ci": asdict(stratified_bootstrap_ci(values, "iqm"))}
        if side == "ours":
            out[side]["eval_returns"] = {str(seed): value for seed, value in per_seed(rows, "eval_return").items()}
    out["speed_ratio"] = out["ours"]["env_steps_per_s"] / out["purejaxrl"]["env_steps_per_s"]
    out["compile_ratio"] = out["ours"]["compile_s"] / out["purejaxrl"]["compile_s"]
    out["probability_ours_higher"] = asdict(probability_of_improvement_ci(
        list(out["ours"]["final_returns"].values()), list(out["purejaxrl"]["final_returns"].values())))
    return out


def _ci(summary: dict, key: str) -> str:
    ci = summary[key]
    return f"{ci['value']:.1f} [{ci['low']:.1f}, {ci['high']:.1f}]"


def markdown(record: dict) -> str:
    lines = ["# One agent: ours vs PureJaxRL's ppo.py (CPU)", "",
             f"{record['machine_text']}; seeds {_seeds_text(record['seeds'])}, each {record['repeats']} time(s) a side, "
             "one process each, the sides interleaved; env steps/s and compile s: medians over a side's processes, "
             f"a timing counting when the 1-minute load average was below {record['max_load']} as it started "
             "(else all of them). Final return of a seed: mean return of the episodes that ended in the last 5% "
             "of updates; over seeds: mean and IQM [95% bootstrap CI]; P(ours > theirs): the probability that "
             "a seed of ours ends above a seed of theirs [95% CI].", "",
             "| case | ours env steps/s | PureJaxRL env steps/s | ratio | ours compile s | PureJaxRL compile s "
             "| compile ratio | ours return, mean | PureJaxRL return, mean | ours IQM | PureJaxRL IQM "
             "| P(ours > theirs) | quiet (ours/theirs) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for case, s in record["summary"].items():
        o, p = s["ours"], s["purejaxrl"]
        poi = s["probability_ours_higher"]
        lines.append(f"| {case} | {o['env_steps_per_s']:,.0f} | {p['env_steps_per_s']:,.0f} | {s['speed_ratio']:.2f}x "
                     f"| {o['compile_s']:.2f} | {p['compile_s']:.2f} | {s['compile_ratio']:.2f}x "
                     f"| {_ci(o, 'final_return_mean_ci')} | {_ci(p, 'final_return_mean_ci')} "
                     f"| {_ci(o, 'final_return_iqm_ci')} | {_ci(p, 'final_return_iqm_ci')} "
                     f"| {poi['value']:.2f} [{poi['low']:.2f}, {poi['high']:.2f}] "
                     f"| {o['quiet_repeats']}/{o['repeats']}, {p['quiet_repeats']}/{p['repeats']} |")
    lines += ["", "Per seed (ours; PureJaxRL):", ""]
    for case, s in record["summary"].items():
        ours = ", ".join(f"{v:.1f}" for v in s["ours"]["final_returns"].values())
        theirs = ", ".join(f"{v:.1f}" for v in s["purejaxrl"]["final_returns"].values())
        lines.append(f"- {case}: {ours}; {theirs}")
    lines += ["", f"Load average (1, 5, 15 min) before: {record['load_avg_before']}, after: {record['load_avg_after']}."]
    return "\n".join(lines)


def _seeds_text(seeds: list[int]) -> str:
    contiguous = seeds == list(range(seeds[0], seeds[0] + len(seeds)))
    return f"{seeds[0]}-{seeds[-1]}" if contiguous and len(seeds) > 1 else ", ".join(map(str, seeds))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", default=str(ROOT / "experiments/peers/purejaxrl"),
                        help="PureJaxRL checkout (experiments/peer_purejaxrl.py says how to get it)")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--repeats", type=int, default=1, help="processes per seed and side")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="one run per seed and side (ours seed=<s>, theirs PRNGKey(s)); experiments/SEEDS.md")
    parser.add_argument("--minatar-steps", type=int, default=1_048_576)
    parser.add_argument("--max-load", type=float, default=1.5)
    parser.add_argument("--wait-s", type=float, default=600.0, help="longest wait for a quiet machine per measurement")
    parser.add_argument("--out", default=str(ROOT / "experiments/results/throughput_one_agent"))
    args = parser.parse_args(argv)
    ppo_file(args.checkout)  # refuses before anything runs when the checkout is missing
    if args.repeats < 1:
        raise SystemExit(f"--repeats {args.repeats}: must be >= 1")
    if len(set(args.seeds)) != len(args.seeds):
        raise SystemExit(f"--seeds {args.seeds}: each seed once (--repeats runs a seed again)")
    record = {"cases": args.cases, "repeats": args.repeats, "seeds": args.seeds, "max_load": args.max_load,
              "minatar_steps": args.minatar_steps, "machine": provenance.machine(),
              "load_avg_before": provenance.load_average(), "measurements": {}, "summary": {}}
    from purejaxrl_opt.host.suites import describe_machine

    record["machine_text"] = describe_machine(record["machine"])
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases:
            ours_overrides, peer_args = case_setup(case, args.minatar_steps)
            rows = record["measurements"][case] = []
            for repeat in range(args.repeats):
                for seed in args.seeds:
                    for side in ("ours", "purejaxrl"):
                        load, quiet = wait_for_quiet(args.max_load, args.wait_s)
                        work = Path(tmp) / f"{case}_{side}_{seed}_{repeat}"
                        work.mkdir()
                        result = (run_ours(ours_overrides, work, seed) if side == "ours"
                                  else run_peer(peer_args, args.checkout, work, seed))
                        rows.append({"side": side, "seed": seed, "repeat": repeat, "quiet": quiet,
                                     "load_avg_before": load, "load_avg_after": provenance.load_average(), **result})
                        print(f"{case} {side} seed {seed} #{repeat}: {result['env_steps_per_s']:,.0f} env steps/s, "
                              f"compile {result['compile_s']:.2f} s, return {result['final_return']:.1f} "
                              f"(load {load[0]})", flush=True)
            record["summary"][case] = summarise(rows)
    record["load_avg_after"] = provenance.load_average()
    out = Path(args.out)
    provenance.write_json(out / "results.json", record)
    provenance.write_markdown(out / "results.md", markdown(record))
    print(markdown(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
