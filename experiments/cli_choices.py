"""Two settings of the training CLI's process environment, A/B: env steps/s and compile s of one agent, and
whether the two train the same bits. Shared by experiments/bench_threefry.py (the threefry hash's CPU
lowering) and experiments/bench_ynn_dots.py (which XLA:CPU fusions YNNPACK runs).

Each measurement is one process of the training CLI (``python -m purejaxrl_opt.train num_seeds=1``, via
experiments/throughput_one_agent.py's ``run_ours``) with one choice's environment variables, the choices
interleaved (A, B, A, B, ...), ``repeats`` times per case. Env steps/s and compile s: the medians over a
choice's processes (``summary.json``'s ``env_steps_per_second`` and ``compile_seconds``); a timing counts
when the 1-minute load average was below ``max_load`` as it started (each waits up to ``wait_s`` for
that; else all count). Same bits: every repeat's ``metrics.csv`` (every update's losses, returns,
lengths) and final evaluation return compared byte for byte between the choices.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import provenance
from throughput_one_agent import run_ours, wait_for_quiet


def compare(case: str, overrides: list[str], choices: dict[str, dict[str, str]], args) -> dict:
    """Measure ``case`` (the CLI's ``overrides``) under each of ``choices`` (name -> environment
    variables); ``args`` has ``repeats``, ``seed``, ``max_load`` and ``wait_s``. The ratios are the
    second choice's over the first's."""
    names = list(choices)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for name in names:
                load, quiet = wait_for_quiet(args.max_load, args.wait_s)
                work = Path(tmp) / f"choice{names.index(name)}_{repeat}"  # (a Hydra path takes no commas)
                row = run_ours([*overrides, "logger=none", "progress.mode=off"], work, args.seed, env=choices[name])
                row["metrics"] = (work / "ours" / "metrics.csv").read_bytes()
                settings = " ".join(f"{k}={v!r}" if " " in v or not v else f"{k}={v}" for k, v in choices[name].items())
                row["command"] = f"{settings} {row['command']}"
                row.update(choice=name, repeat=repeat, load_before=load, quiet=quiet)
                rows.append(row)
                print(f"{case} {name} #{repeat}: {row['env_steps_per_s']:,.0f} env steps/s, compile "
                      f"{row['compile_s']:.2f} s (load {load[0]:.2f})", flush=True)
    first = [r for r in rows if r["choice"] == names[0]]
    same = all(a["metrics"] == b["metrics"] and a["eval_return"] == b["eval_return"]
               for a in first for b in rows if b["repeat"] == a["repeat"] and b is not a)
    out = {"same_bits": same, "overrides": overrides,
           "command": {n: next(r["command"] for r in rows if r["choice"] == n) for n in names}}
    for name in names:
        mine = [r for r in rows if r["choice"] == name]
        use = [r for r in mine if r["quiet"]] or mine
        out[name] = {"env_steps_per_s": statistics.median(r["env_steps_per_s"] for r in use),
                     "compile_s": statistics.median(r["compile_s"] for r in use),
                     "quiet_repeats": sum(r["quiet"] for r in mine), "repeats": len(mine),
                     "all_env_steps_per_s": [r["env_steps_per_s"] for r in mine],
                     "all_compile_s": [r["compile_s"] for r in mine]}
    a, b = names[:2]
    out["speed_ratio"] = out[b]["env_steps_per_s"] / out[a]["env_steps_per_s"]
    out["compile_ratio"] = out[b]["compile_s"] / out[a]["compile_s"]
    return out


def markdown(record: dict, title: str, names: tuple[str, str]) -> str:
    """The results table of :func:`compare`'s cases (``record["summary"]``); the ratios are ``names[1]``'s
    over ``names[0]``'s."""
    a, b = names
    lines = [f"# {title}", "",
             f"{record['machine_text']}; seed {record['seed']}, {record['repeats']} process(es) per choice and "
             "case, interleaved; medians over a choice's processes (those started below the load bound, "
             f"{record['max_load']}, where any). Same bits: every update's metrics and the final evaluation "
             "byte for byte equal between the choices, in every repeat.", "",
             f"| case | {a} env steps/s | {b} env steps/s | ratio | {a} compile s | {b} compile s "
             f"| compile ratio | same bits | quiet ({a}/{b}) |",
             "|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for case, s in record["summary"].items():
        x, y = s[a], s[b]
        lines.append(f"| {case} | {x['env_steps_per_s']:,.0f} | {y['env_steps_per_s']:,.0f} | {s['speed_ratio']:.2f}x "
                     f"| {x['compile_s']:.2f} | {y['compile_s']:.2f} | {s['compile_ratio']:.2f}x "
                     f"| {'yes' if s['same_bits'] else 'NO'} | {x['quiet_repeats']}/{x['repeats']}, "
                     f"{y['quiet_repeats']}/{y['repeats']} |")
    return "\n".join(lines) + "\n"  # write_markdown adds the commit and command


def write(args, summary: dict, title: str, names: tuple[str, str]) -> int:
    """Write ``args.out``/results.json and results.md of :func:`compare`'s ``summary`` (case -> result),
    print the table; 0 when every case trained the same bits both ways, else 1."""
    from purejaxrl_opt.host.suites import describe_machine

    machine = provenance.machine()
    record = {"machine": machine, "machine_text": describe_machine(machine), "seed": args.seed,
              "repeats": args.repeats, "max_load": args.max_load, "minatar_steps": args.minatar_steps,
              "summary": summary}
    provenance.write_json(Path(args.out) / "results.json", record)
    text = markdown(record, title, names)
    provenance.write_markdown(Path(args.out) / "results.md", text)
    print(text)
    return 0 if all(s["same_bits"] for s in summary.values()) else 1


def parse_args(argv, doc: str, cases: list[str], out: str):
    """The two benchmarks' command line: ``--cases`` (of ``cases``, default all), ``--repeats``, ``--seed``,
    ``--minatar-steps``, ``--max-load``, ``--wait-s`` and ``--out`` (default ``out``)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=list(cases), choices=list(cases))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--minatar-steps", type=int, default=1_048_576)
    parser.add_argument("--max-load", type=float, default=1.5)
    parser.add_argument("--wait-s", type=float, default=60.0)
    parser.add_argument("--out", default=out)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    return args
