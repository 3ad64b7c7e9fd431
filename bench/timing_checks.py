"""The project's wall-clock limits, checked as a benchmark (`make timing`): grammar compile
times and the cached forced-drafts call (bench/grammar_times.py), then serving stalls on the
tests' tiny models (bench/serving_stalls.py).

    python bench/timing_checks.py [--only grammar|serving]

Each check prints one row as it is measured (the value beside its limit, PASS or MISS),
then one JSON line per check and the tally; the exit status is 1 when any check missed.
The test suite never reads the wall clock: it checks the same mechanisms by counting
(work units, cache builds, binds, steps, a compile held on an event). Run it on a quiet
machine; a loaded host misses limits the code meets.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import grammar_times, serving_stalls  # noqa: E402
from bench.limit_check import LimitCheck, report  # noqa: E402

GROUPS = ("grammar", "serving")


def measured(only: str | None, models_dir: Path) -> Iterator[LimitCheck]:
    """The checks of the group `only` (None: both), each as soon as it is measured."""
    if only in (None, "grammar"):
        print("== grammar compile times", flush=True)
        yield from grammar_times.checks()
    if only in (None, "serving"):
        print("== serving stalls", flush=True)
        yield from serving_stalls.checks(models_dir)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=GROUPS, help="run one group of checks")
    args = parser.parse_args(argv)
    checks: list[LimitCheck] = []
    with tempfile.TemporaryDirectory(prefix="tl-timing-") as models_dir:
        for check in measured(args.only, Path(models_dir)):
            print(check.row(), flush=True)
            checks.append(check)
    return report(checks)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
