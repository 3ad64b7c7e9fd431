"""`tlserve.py run-batch` for the tests that kill it halfway, with every engine step slowed
so that it is still running when the test has seen its first output lines:

    python -m tests.cli.child_run_batch STEP_DELAY_S [run-batch's flags ...]

The delay reaches the engine through the EngineWrapper seam (tests/fakes.py's StepDelay),
as tests/e2e/child_tlserve.py does for the server: it is no flag of run-batch."""
from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from engine.blas_env import tune_blas_threads
    tune_blas_threads()                      # as tlserve.py does, before numpy is imported
    from cli.batch import main as run_batch
    from tests.fakes import step_delay
    delay_s = float(argv[0])
    return run_batch(argv[1:], wrap_engine=step_delay(delay_s) if delay_s else None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
