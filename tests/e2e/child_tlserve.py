"""tlserve.py for the end-to-end tests that run the server as a child process, with every
engine step slowed:

    python -m tests.e2e.child_tlserve STEP_DELAY_S [tlserve's serve flags ...]

The delay reaches the engine through server/serve.py's EngineWrapper seam (tests/fakes.py's
StepDelay), as `running_server(step_delay_s=...)` does in-process: it is no config key."""
from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from engine.blas_env import tune_blas_threads
    tune_blas_threads()                      # as tlserve.py does, before numpy is imported
    from server.serve import main as serve
    from tests.fakes import step_delay
    delay_s = float(argv[0])
    return serve(argv[1:], wrap_engine=step_delay(delay_s) if delay_s else None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
