"""How far a batch run has come, for the person watching it.

`Progress` counts the answers (done / total, the tokens they generated) and says so:

    on a terminal:   one line redrawn in place, at most every `TTY_REDRAW_S`
                     [##########..........]  512/1000  51%  843.2 tok/s  ETA 0:00:37
    otherwise:       a plain line every `PLAIN_EVERY_S` (a log file gets no bar, no \\r)
                     run-batch: 512/1000 done (51%), 843.2 tok/s, ETA 0:00:37

The rate is over the answers of this run only (lines skipped on resuming count as done but
took no time); the ETA is the lines left at this run's lines-per-second. The clock is
injected, so what is printed at which moment can be tested without waiting.
"""
from __future__ import annotations

import time
from typing import Callable, TextIO

TTY_REDRAW_S = 0.2
PLAIN_EVERY_S = 10.0
BAR_CELLS = 20


def clock_text(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    def __init__(self, out: TextIO, *, total: int, already_done: int, tty: bool,
                 clock: Callable[[], float] = time.monotonic):
        self.out, self.tty, self.clock = out, tty, clock
        self.total, self.done = total, already_done
        self.run_done = 0                    # answered by this run
        self.tokens = 0
        self.failed = 0                      # answers whose status is not 2xx
        self.start_s = clock()
        self._last_shown_s: float | None = None
        self._width_chars = 0                # the widest bar line drawn so far

    def add(self, status: int, output_tokens: int) -> None:
        self.done += 1
        self.run_done += 1
        self.tokens += output_tokens
        if not 200 <= status < 300:
            self.failed += 1
        self.maybe_show()

    def maybe_show(self) -> None:
        now = self.clock()
        every = TTY_REDRAW_S if self.tty else PLAIN_EVERY_S
        if self._last_shown_s is None or now - self._last_shown_s >= every:
            self.show(now)

    def show(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        self._last_shown_s = now
        if self.tty:       # padded: a shorter line must cover all of the last one
            line = self.bar_line(now)
            self.out.write("\r" + line.ljust(self._width_chars))
            self._width_chars = max(self._width_chars, len(line))
        else:
            self.out.write(self.plain_line(now) + "\n")
        self.out.flush()

    def finish(self) -> None:
        """The last picture, and the line ended on a terminal."""
        self.show()
        if self.tty:
            self.out.write("\n")
            self.out.flush()

    def _numbers(self, now: float) -> tuple[str, float, str]:
        elapsed_s = now - self.start_s
        percent = f"{100 * self.done // self.total if self.total else 100}%"
        rate_tok_s = self.tokens / elapsed_s if elapsed_s > 0 else 0.0
        left = self.total - self.done
        if left <= 0:
            eta = clock_text(0)
        elif self.run_done and elapsed_s > 0:
            eta = clock_text(left * elapsed_s / self.run_done)
        else:
            eta = "?"
        return percent, rate_tok_s, eta

    def bar_line(self, now: float) -> str:
        percent, rate_tok_s, eta = self._numbers(now)
        filled = BAR_CELLS * self.done // self.total if self.total else BAR_CELLS
        bar = "#" * filled + "." * (BAR_CELLS - filled)
        failed = f"  {self.failed} failed" if self.failed else ""
        return (f"[{bar}] {self.done}/{self.total} {percent:>4}  {rate_tok_s:.1f} tok/s  "
                f"ETA {eta}{failed}")

    def plain_line(self, now: float) -> str:
        percent, rate_tok_s, eta = self._numbers(now)
        failed = f", {self.failed} failed" if self.failed else ""
        return (f"run-batch: {self.done}/{self.total} done ({percent}){failed}, "
                f"{rate_tok_s:.1f} tok/s, ETA {eta}")
