"""The progress of a batch run (server/batch/progress.py) on an injected clock: a bar
redrawn in place on a terminal, a plain line every PLAIN_EVERY_S otherwise."""
from __future__ import annotations

import io

from server.batch.progress import PLAIN_EVERY_S, TTY_REDRAW_S, Progress


class Clock:
    def __init__(self):
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_the_terminal_bar_shows_done_total_rate_and_eta():
    out, clock = io.StringIO(), Clock()
    progress = Progress(out, total=10, already_done=2, tty=True, clock=clock)
    clock.now_s += 4.0
    progress.add(200, 100)              # 3/10 after 4 s: 25 tok/s, 7 left at 4 s each
    assert out.getvalue() == "\r[######..............] 3/10  30%  25.0 tok/s  ETA 0:00:28"
    clock.now_s += TTY_REDRAW_S / 2
    progress.add(500, 0)                # too soon to redraw
    assert out.getvalue().count("\r") == 1
    progress.finish()
    # 4/10 after 4.1 s: 100 tokens / 4.1 s, 6 left at 4.1 s / 2 answers each
    assert out.getvalue().endswith("\r[########............] 4/10  40%  24.4 tok/s  ETA 0:00:12"
                                   "  1 failed\n")


def test_a_shorter_bar_line_covers_the_longer_one_before_it():
    out, clock = io.StringIO(), Clock()
    progress = Progress(out, total=2, already_done=0, tty=True, clock=clock)
    progress.add(500, 0)                                    # "... 1 failed": the long one
    clock.now_s += TTY_REDRAW_S
    progress.failed = 0
    progress.show()
    first, second = out.getvalue().split("\r")[1:]
    assert len(second) == len(first) and second.endswith(" ")


def test_plain_lines_come_every_interval_without_carriage_returns():
    out, clock = io.StringIO(), Clock()
    progress = Progress(out, total=4, already_done=0, tty=False, clock=clock)
    progress.add(200, 10)               # at once: no rate, no ETA yet
    clock.now_s += PLAIN_EVERY_S / 2
    progress.add(200, 10)
    clock.now_s += PLAIN_EVERY_S / 2
    progress.add(200, 10)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert lines == ["run-batch: 1/4 done (25%), 0.0 tok/s, ETA ?",
                     "run-batch: 3/4 done (75%), 3.0 tok/s, ETA 0:00:03"]


def test_no_answer_yet_has_no_eta():
    out = io.StringIO()
    Progress(out, total=3, already_done=0, tty=False, clock=Clock()).show()
    assert out.getvalue() == "run-batch: 0/3 done (0%), 0.0 tok/s, ETA ?\n"
