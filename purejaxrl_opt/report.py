"""Collect every run below a directory into one table and learning-curve plots.

    python -m purejaxrl_opt.report SWEEP_DIR [--out DIR] [--metric return_mean]

Finds every ``summary.json`` (with its ``metrics.csv``) below ``SWEEP_DIR`` -- Hydra multirun jobs,
single runs, in-compile sweeps -- and pools the seeds of identical configurations (the same resolved
config apart from the seed, whichever job or lane they came from). Writes into ``--out`` (default
``SWEEP_DIR``):

* ``report.csv`` and ``report.md``: one row per (algo, env, config): the config keys that differ
  between rows of the same algo and env ("swept values"), the number of seeds, mean, std and 95% CI
  (Student-t, ``t_{0.975, n-1} std / sqrt(n)``, as in ``summary.json``; none for one seed) of the
  final return over seeds,
  and env steps/s (per job, all its lanes, compile excluded; averaged over the jobs);
* ``learning_curves.png``: one panel per env, one line per (algo, config): the mean over seeds of
  ``--metric`` (each seed's curve smoothed over ``--smooth`` updates) against env steps with a
  shaded 95% CI band.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from purejaxrl_opt.host.report import git_commit, write_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m purejaxrl_opt.report", description=__doc__.split("\n")[0])
    parser.add_argument("root", help="directory searched (recursively) for summary.json files")
    parser.add_argument("--out", help="where to write the report (default: ROOT)")
    parser.add_argument("--metric", default="return_mean", help="metrics.csv column to plot")
    parser.add_argument("--smooth", type=int, default=None,
                        help="moving-average window in updates (default: ~2%% of the updates; 1 = raw)")
    args = parser.parse_args(argv)
    if not Path(args.root).is_dir():
        parser.error(f"{args.root} is not a directory")
    try:
        command = shlex.join(["python", "-m", "purejaxrl_opt.report", *(sys.argv[1:] if argv is None else argv)])
        paths = write_report(args.root, args.out, args.metric, args.smooth,
                             commit=git_commit() or "unknown", command=command)
    except FileNotFoundError as error:
        print(f"purejaxrl_opt.report: {error}", file=sys.stderr)
        return 2
    print(Path(paths["markdown"]).read_text())
    print(f"[report] {paths['groups']} row(s) -> {paths['csv']}, {paths['markdown']}, {paths['plot']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
