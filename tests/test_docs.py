"""README's claims point at results that exist and say where they came from."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _provenance():
    spec = importlib.util.spec_from_file_location("provenance", ROOT / "experiments" / "provenance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_results_file_readme_cites_exists_and_names_its_commit_and_command():
    provenance = _provenance()
    assert len(provenance.cited_paths()) >= 10  # the parser finds README's citations
    assert provenance.problems() == []


def test_provenance_check_catches_a_missing_file_and_an_unstamped_one(tmp_path):
    provenance = _provenance()
    readme = tmp_path / "README.md"
    readme.write_text("see `experiments/results/no_such_file.md` and `experiments/results/decode.{json,md}`")
    assert provenance.cited_paths(readme) == ["no_such_file.md", "decode.json", "decode.md"]
    found = provenance.problems(readme)
    assert any(p.startswith("no_such_file.md: cited by README.md but missing") for p in found)
    assert any(p.startswith("decode.md: cited by README.md but missing") for p in found)
    assert not any(p.startswith("decode.json") for p in found)  # in PROVENANCE.json
