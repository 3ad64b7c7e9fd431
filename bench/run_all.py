"""Run every benchmark once, one after another, in one session (`make bench`).

Speed targets are ratios measured side by side (our code vs the numpy roofline, vs the
standard library's server, offline vs HTTP), so each script measures its own baseline in the
same run. Run on a quiet machine: two cores shared with anything else make BLAS collapse.
Each script prints a table and one JSON line per case; this runner copies everything to
`bench/out/<timestamp>.log` (gitignored) as well as the terminal.

    python bench/run_all.py [--quick]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (script, full-run arguments, quick-run arguments), in the order they were written.
BENCHMARKS = (
    ("bench_load.py", [], ["--repeat", "1"]),
    ("bench_tokenizer.py", [], ["--repeat", "1"]),
    ("bench_template.py", [], []),
    ("bench_model.py", [], ["--repeats", "1"]),
    ("engine_throughput.py", [], ["--quick"]),
    ("bench_http.py", [], ["--rounds", "1"]),
    ("serve_load.py", [], ["--quick"]),
    ("timing_checks.py", [], []),
)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs of every benchmark")
    args = parser.parse_args(argv)
    out_dir = REPO / "bench" / "out"
    out_dir.mkdir(exist_ok=True)
    log_path = out_dir / time.strftime("%Y%m%d-%H%M%S.log")
    failures = 0
    with open(log_path, "w", encoding="utf-8") as log:
        for script, full, quick in BENCHMARKS:
            command = [sys.executable, str(REPO / "bench" / script), *(quick if args.quick else full)]
            banner = f"\n=== {' '.join(command[1:])}\n"
            print(banner, end="", flush=True)
            log.write(banner)
            result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
            sys.stdout.write(result.stdout + result.stderr)
            log.write(result.stdout + result.stderr)
            failures += result.returncode != 0
    print(f"\nlog: {log_path}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
