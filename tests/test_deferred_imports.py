"""gymnax's Pong imports seaborn at import time; the env layer defers it (purejaxrl_opt/envs/deferred.py):
importing the env layer and gymnax loads no seaborn, pandas or scipy.stats, and Pong's palette, read
through the stand-in, is seaborn's own. In a fresh interpreter (the test session may have them loaded)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT, cli_environment

PROBE = """
import json, sys
import purejaxrl_opt.envs, gymnax
from gymnax.environments.misc import pong
loaded = sorted(m for m in ("seaborn", "pandas", "scipy.stats")
                if m in sys.modules and type(sys.modules[m]).__name__ != "_Deferred")
palette = [list(map(float, c)) for c in pong.sns.color_palette("cubehelix", 3)]
import seaborn
print(json.dumps({"loaded_before_use": loaded, "palette": palette,
                  "real_after_use": type(sys.modules["seaborn"]).__name__ == "module",
                  "same_palette": palette == [list(map(float, c)) for c in seaborn.color_palette("cubehelix", 3)]}))
"""


def test_seaborn_is_loaded_only_when_a_render_reads_it():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=cli_environment())
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["loaded_before_use"] == []
    assert result["real_after_use"] and result["same_palette"] and len(result["palette"]) == 3
