"""Progress bars for the long jobs: training, SFT, the benchmark suite, evaluate's rendering.

A bar says the steps done of the total, the rate (steps per second of this process) and the time
left, on one line that redraws itself (tqdm: it fits the terminal's width and nests: the benchmark
suite's bar stays on top while each entry's training bar runs below it). It is drawn only on a
terminal: output to a pipe or a file (a log, a SLURM job, CI) gets no bar characters at all, the
same test the training console has always made (``stream.isatty()``).

Lines printed while bars are shown go through :func:`write`, which clears the bars, prints the
line and redraws them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import ClassVar

from tqdm import tqdm

from purejaxrl_opt.config.schema import _check, one_of


# the ``progress`` section of a training run (composed in host/settings.py)
@dataclass(frozen=True)
class ProgressConfig:
    mode: str = "auto"  # auto (bar on a terminal, lines otherwise) | bar | lines | off
    chunks: int = 10  # jitted chunks the training runs as, so progress can be shown

    MODES: ClassVar[tuple[str, ...]] = ("auto", "bar", "lines", "off")

    def validate(self, prefix: str = "progress") -> None:
        one_of(f"{prefix}.mode", self.mode, self.MODES)
        _check(self.chunks >= 1, f"{prefix}.chunks", self.chunks, "an int >= 1")

    @property
    def num_chunks(self) -> int:
        """Chunks the runner splits training into (one when nothing is shown)."""
        return self.chunks if self.mode != "off" else 1


def is_terminal(stream=None) -> bool:
    """Whether ``stream`` (default: stdout) is a terminal: where bars are drawn by default."""
    stream = sys.stdout if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def write(text: str, stream=None, end: str = "\n") -> None:
    """Print ``text`` to ``stream`` (default: stdout) above any bars drawn there, and flush."""
    stream = sys.stdout if stream is None else stream
    tqdm.write(text, file=stream, end=end)
    stream.flush()


class Bar:
    """One progress bar: ``done/total unit [elapsed<left, rate unit/s, postfix]``.

    ``enabled`` None (the default) draws it on a terminal only; False never (every method is then a
    no-op costing nothing); True always. ``initial`` is work done before this process started (a
    resumed run): it counts towards the total but not towards the rate. The rate is the average
    over the bar's lifetime (tqdm's ``smoothing=0``): chunks of work arrive seconds apart, an
    exponential average over a handful of updates would only jitter.
    """

    FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt}{unit} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"

    def __init__(self, total: float, unit: str = "steps", desc: str | None = None, stream=None,
                 initial: float = 0, enabled: bool | None = None, unit_scale: bool = True,
                 started_at: float | None = None):
        """``started_at``: when the work began (``time.time()``), if before this bar was made."""
        stream = sys.stdout if stream is None else stream
        self.enabled = is_terminal(stream) if enabled is None else bool(enabled)
        self._bar = None
        if self.enabled:
            # leave=None: the outermost bar stays on screen when done, nested ones are cleared
            self._bar = tqdm(total=total, initial=int(initial), unit=f" {unit}", unit_scale=unit_scale,
                             desc=desc, file=stream, leave=None, dynamic_ncols=True, smoothing=0,
                             mininterval=0.1, miniters=0, bar_format=self.FORMAT,
                             delay=1e-9)  # first drawn by the first update, not at 0 on creation
            if started_at is not None:
                self._bar.start_t = self._bar.last_print_t = started_at

    def update_to(self, done: float, total: float | None = None, postfix: str | None = None) -> None:
        """Set the work done so far (and, if given, a new total and the text after the rate)."""
        if self._bar is None:
            return
        if total is not None:
            self._bar.total = total
        if postfix is not None:
            self._bar.set_postfix_str(postfix, refresh=False)
        self._bar.n = int(done) if float(done).is_integer() else done
        self._bar.refresh()

    def add_initial(self, amount: float) -> None:
        """Work that became done without this process doing it (a finished entry read back)."""
        if self._bar is None:
            return
        self._bar.initial += int(amount)
        self._bar.n += int(amount)
        self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
