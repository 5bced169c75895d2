"""How many kernels each loop of one agent's compiled PPO update runs, ours and PureJaxRL's ``ppo.py``
side by side: a count read from XLA:CPU's optimised program, the same on every run (no timing noise).

    python experiments/count_kernels.py --checkout experiments/peers/purejaxrl --num-envs 4

Each side's process is experiments/profile_one_agent.py's (the same programs it profiles), started with
``--xla_dump_to`` so that XLA writes its optimised HLO; its largest module is then read. On XLA:CPU every
instruction of a loop body that is not a parameter, tuple, tuple element, bitcast or constant runs as one
thunk (a fusion, a product, a copy, a sort, ...) per iteration, so a body's count is what the runtime
steps through each time round. For every ``while`` the table gives its known trip count, its body's
thunks by kind and the nested loops it starts. Writes ``--out``/kernels.json and kernels.md (commit and
command: experiments/provenance.py).
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from collections import Counter
from pathlib import Path

import profile_one_agent
import provenance

ROOT = Path(__file__).resolve().parents[1]
FREE = {"parameter", "get-tuple-element", "tuple", "bitcast", "constant"}
_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) \(.*\{$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?[\w.\-]+ = .*? ([a-z][\w\-]*)\(")


def computations(hlo: str) -> dict[str, list[str]]:
    """``{name: [instruction lines]}`` of an HLO text module."""
    out, current = {}, None
    for line in hlo.splitlines():
        match = _COMPUTATION.match(line)
        if match:
            current = out[match.group(1)] = []
        elif line.startswith("}"):
            current = None
        elif current is not None and " = " in line:
            current.append(line)
    return out


def _body(line: str) -> str:
    return re.search(r"body=%?([\w.\-]+)", line).group(1)


def _callee(line: str) -> str:
    return re.search(r"to_apply=%?([\w.\-]+)", line).group(1)


def _trip_count(line: str) -> int | None:
    trip = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
    return int(trip.group(1)) if trip else None


def entry_name(hlo: str) -> str:
    """The name of the module's entry computation."""
    return next(m.group(1) for line in hlo.splitlines() if (m := re.match(r"^ENTRY %?([\w.\-]+) ", line)))


def thunk_kinds(lines: list[str]) -> Counter:
    """The thunks of one computation's instruction lines, by kind (free instructions left out; a loop's or
    a callee's own thunks not included)."""
    return Counter(m.group(1) for line in lines if (m := _INSTRUCTION.match(line)) and m.group(1) not in FREE)


def _loops_started(comps: dict[str, list[str]], name: str) -> list[str]:
    """The bodies of the loops computation ``name`` starts: its own ``while``s and those of the
    computations it ``call``s (XLA:CPU wraps small loops in calls)."""
    out = []
    for line in comps.get(name, []):
        if " while(" in line:
            out.append(_body(line))
        elif " call(" in line:
            out += _loops_started(comps, _callee(line))
    return out


def loops(hlo: str) -> list[dict]:
    """Every ``while`` of the module: the computation it sits in, its trip count (None when XLA does not
    know it), its body's thunks by kind and the bodies of the loops its body starts (directly or through
    a ``call``)."""
    comps = computations(hlo)
    found = []
    for parent, lines in comps.items():
        for line in lines:
            if " while(" not in line:
                continue
            body = _body(line)
            kinds = thunk_kinds(comps.get(body, []))
            found.append({"in": parent, "body": body, "trip_count": _trip_count(line),
                          "thunks": sum(kinds.values()), "by_kind": dict(kinds.most_common()),
                          "nested": _loops_started(comps, body)})
    return found


def executions(hlo: str) -> int:
    """Thunks the module's entry computation runs in all: each instruction of a computation (not a free
    one) once, a ``call`` also running its callee, a ``while`` its body known-trip-count times (a loop
    whose trip count XLA does not know counts once: a lower bound)."""
    comps = computations(hlo)
    memo: dict[str, int] = {}

    def run(name: str) -> int:
        if name not in memo:
            lines = comps.get(name, [])
            total = sum(thunk_kinds(lines).values())
            for line in lines:
                if " while(" in line:
                    total += (_trip_count(line) or 1) * run(_body(line))
                elif " call(" in line:
                    total += run(_callee(line))
            memo[name] = total
        return memo[name]

    return run(entry_name(hlo))


def dump(side: str, args) -> str:
    """Run ``side``'s profiled process until it is ready, with XLA dumping; the largest optimised module."""
    with tempfile.TemporaryDirectory() as tmp:
        ready, dump_dir = Path(tmp) / "ready", Path(tmp) / "hlo"
        env = dict(os.environ)
        if side == "ours":  # the CLI's lowering of JAX's threefry hash (purejaxrl_opt/host/xla_flags.py)
            env["PUREJAXRL_OPT_THREEFRY"] = args.threefry
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_dump_to={dump_dir} --xla_dump_hlo_as_text".strip()
        with profile_one_agent.ready_child(side, args, ready, env):
            pass  # compiled (so dumped) once it is ready
        modules = sorted(dump_dir.glob("*after_optimizations.txt"), key=lambda p: p.stat().st_size)
        if not modules:
            raise SystemExit(f"the {side} process wrote no optimised module to {dump_dir}")
        return modules[-1].read_text()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", default=None, help="PureJaxRL's checkout (without it: ours only)")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--updates", type=int, default=8, help="updates in the profiled program")
    parser.add_argument("--threefry", choices=("rolled", "unrolled"), default="rolled",
                        help="ours: PUREJAXRL_OPT_THREEFRY (rolled: JAX's own CPU lowering, the default)")
    parser.add_argument("--out", default=str(ROOT / "experiments/results/throughput_one_agent"))
    args = parser.parse_args(argv)
    sides = ["ours"] + (["purejaxrl"] if args.checkout else [])
    modules = {side: dump(side, args) for side in sides}
    results = {side: loops(hlo) for side, hlo in modules.items()}
    per_update = {side: executions(hlo) / args.updates for side, hlo in modules.items()}
    out = Path(args.out)
    provenance.write_json(out / "kernels.json", {"num_envs": args.num_envs, "updates": args.updates,
                                                 "threefry": args.threefry,
                                                 "thunks_per_update": per_update, "loops": results})
    lines = [f"# Kernels per loop iteration of one agent's PPO update, CartPole, {args.num_envs} envs x 128 steps",
             "", "Read from XLA:CPU's optimised program of each side (see experiments/count_kernels.py). Thunks "
             f"run per update (the whole program of {args.updates} updates, divided by {args.updates}; "
             f"PureJaxRL's includes its init; ours with the threefry hash {args.threefry}): " + ", ".join(f"{side} {n:,.0f}" for side, n in per_update.items()) + ".", ""]
    for side, found in results.items():
        lines += [f"## {side}", "", "| loop body | in | trip count | thunks | by kind | nested loops |",
                  "|---|---|---:|---:|---|---:|"]
        for loop in found:
            kinds = ", ".join(f"{k} {n}" for k, n in loop["by_kind"].items())
            lines.append(f"| {loop['body']} | {loop['in']} | {loop['trip_count']} | {loop['thunks']} | {kinds} | "
                         f"{len(loop['nested'])} |")
        lines.append("")
    provenance.write_markdown(out / "kernels.md", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
