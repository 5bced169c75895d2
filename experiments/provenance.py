"""Where every figure comes from: a results file names the commit and the command that made it.

    python experiments/provenance.py check          # every results file README.md and docs/*.md cite: exists, with both

What every experiment script shares: :func:`stamp` / :func:`markdown_footer` (commit, dirty flag,
command line), :func:`run_logged` (a CLI run with its log), :func:`load_average`, :func:`machine`, :func:`write_json` / :func:`write_markdown`.
Scripts run as ``python experiments/<name>.py`` from the repository root with the package installed,
so ``import provenance`` finds this file beside them.

Two ways a results file names its origin:

* the file itself: ``commit`` and ``command`` keys (JSON) or lines ``commit: ...`` / ``command: ...``
  (Markdown). New experiments write them with :func:`stamp` (JSON) or :func:`markdown_footer`;
* for files written before that rule, ``experiments/results/PROVENANCE.json`` maps the file's path
  (relative to ``experiments/results/``) to ``{"commit": ..., "command": ...}``: the commit is the one
  that committed the numbers (the code they measured is that commit's parent tree or the commit
  itself), the command is the one README gives for them.

``check`` reads README.md and every page of the manual (docs/*.md), expands brace groups
(``a.{md,png}``), and fails, naming the results file and the page citing it, where a cited path does
not exist or names no commit and command. tests/test_docs.py runs it in the fast tier.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
MANIFEST = RESULTS / "PROVENANCE.json"
_CITE = re.compile(r"experiments/results/[A-Za-z0-9_.{},*/-]+")
# fenced code blocks: the commands shown there may name where they write (``--out experiments/results/X``),
# which is not a citation of a results file
_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[ \t]*$", re.M | re.S)


def commit() -> str:
    """The checked-out commit, ``+dirty`` when tracked files outside ``experiments/results/`` have
    uncommitted changes: the mark is for code and configs that differ from the commit, not for the
    results an experiment (or an earlier step of it, e.g. a report over per-run files) writes there."""
    from purejaxrl_opt.host.artifacts import git_commit

    return git_commit(exclude=("experiments/results",)) or "unknown"


def checkout_commit(checkout, short: int | None = None) -> str | None:
    """The commit of another checkout (a peer's clone, a worktree of an earlier commit), ``short``
    hex digits or the whole hash; None when it is not a git clone (an exported tree)."""
    import subprocess

    cmd = ["git", "-C", str(checkout), "rev-parse", *([f"--short={short}"] if short else []), "HEAD"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def load_average() -> list[float]:
    """The 1, 5 and 15-minute load averages (on a small shared machine, whether a timing ran alone)."""
    import os

    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict:
    """CPU, cores, device, jax and Python versions (the benchmark suites' description of a machine)."""
    from purejaxrl_opt.host.suites import machine as describe

    return describe()


def write_json(path: str | Path, record: dict) -> Path:
    """``record`` with the commit and command (:func:`stamp`) first, written to ``path`` (parents made)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**stamp(), **record}, indent=1) + "\n")
    return path


def write_markdown(path: str | Path, text: str) -> Path:
    """``text`` and the provenance lines (:func:`markdown_footer`), written to ``path`` (parents made)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n" + markdown_footer())
    return path


def run_logged(cmd: list[str], log: str | Path) -> None:
    """Run ``cmd`` from the repository root with its output in ``log``; exit naming the log if it fails
    (the runners that chain CLI runs: compare_tokens.py, learn_lm.py)."""
    import subprocess

    print("$", " ".join(cmd), flush=True)
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}); see {log}")


def command() -> str:
    """This process's command line, as a shell would take it."""
    return "python " + " ".join(shlex.quote(a) for a in sys.argv)


def stamp() -> dict:
    """``{"commit": ..., "command": ...}`` for a JSON results file."""
    return {"commit": commit(), "command": command()}


def markdown_footer() -> str:
    """The provenance lines for a Markdown results file."""
    return f"\ncommit: {commit()}\ncommand: `{command()}`\n"


def _expand(path: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", path)
    if match is None:
        return [path]
    head, tail = path[:match.start()], path[match.end():]
    return [p for option in match.group(1).split(",") for p in _expand(head + option + tail)]


def documents() -> list[Path]:
    """The files whose citations are checked: README.md and the manual's pages (docs/*.md)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _as_list(docs: Path | list[Path] | None) -> list[Path]:
    if docs is None:
        return documents()
    return [docs] if isinstance(docs, Path) else list(docs)


def citations(docs: Path | list[Path] | None = None) -> dict[str, Path]:
    """Every ``experiments/results/...`` path cited by ``docs`` (default :func:`documents`), relative
    to ``experiments/results/``, mapped to the first document citing it."""
    found: dict[str, Path] = {}
    for doc in _as_list(docs):
        for raw in _CITE.findall(_FENCE.sub("", doc.read_text())):
            for path in _expand(raw.rstrip(".,;:)`")):
                rel = path[len("experiments/results/"):].rstrip("/")
                if rel and rel not in found:
                    found[rel] = doc
    return found


def cited_paths(docs: Path | list[Path] | None = None) -> list[str]:
    """Every ``experiments/results/...`` path ``docs`` cite (default: README.md and docs/*.md),
    relative to ``experiments/results/``, in order of first citation."""
    return list(citations(docs))


def _names_itself(path: Path) -> bool:
    if path.is_dir():
        return any(_names_itself(p) for p in path.iterdir() if p.is_file())
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError):
            return False
        return isinstance(data, dict) and bool(data.get("commit")) and bool(data.get("command"))
    if path.suffix in (".md", ".txt", ".csv"):
        text = path.read_text()
        return (bool(re.search(r"^(?:- )?commit: \S+", text, re.M))
                and bool(re.search(r"^(?:- )?command: \S+", text, re.M)))
    return False


def _name(doc: Path) -> str:
    try:
        return str(doc.relative_to(ROOT))
    except ValueError:
        return doc.name


def problems(docs: Path | list[Path] | None = None) -> list[str]:
    """What is wrong with the citations of ``docs`` (default: README.md and docs/*.md); empty when
    every cited file exists and names both its commit and its command."""
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    out = []
    for rel, doc in citations(docs).items():
        path = RESULTS / rel
        if not path.exists():
            out.append(f"{rel}: cited by {_name(doc)} but missing")
            continue
        entry = manifest.get(rel, {})
        if not (_names_itself(path) or (entry.get("commit") and entry.get("command"))):
            out.append(f"{rel}: names no commit and command (in the file or in PROVENANCE.json)")
    return out


def main(argv: list[str]) -> int:
    if argv[:1] != ["check"]:
        print(__doc__)
        return 2
    found = problems()
    for line in found:
        print(f"[provenance] {line}")
    print(f"[provenance] {len(cited_paths())} cited results paths in {len(documents())} documents, "
          f"{len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
