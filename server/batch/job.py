"""One batch file run to its end: what is left to answer, answered, each answer written once.

    input lines (lines.py) -> minus the keys the output already holds (output.py)
      -> refused lines: their 400 line written at once, no request
      -> tasks: the runner (runner.py), many in flight; each answer written as it comes
      -> progress (progress.py) after every answer

`run_lines` is the whole of it, given its parts built (cli/batch.py builds them: the
models, the API application, the output file); it returns a `RunSummary`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from server.batch.lines import BadLine, BatchLine, Task
from server.batch.output import Answer, OutputFile, refused
from server.batch.progress import Progress
from server.batch.runner import BatchRunner
from server.door.request_id import MINTED_ID_BYTES


@dataclass(frozen=True)
class RunSummary:
    total_lines: int
    skipped_lines: int          # answered by an earlier run (resumed)
    answered_lines: int         # answered by this run
    failed_lines: int           # answered by this run with a status that is not 2xx
    left_lines: int             # not answered: the run was stopped

    @property
    def complete(self) -> bool:
        return self.left_lines == 0


def pending_lines(lines: list[BatchLine], done_keys: set[str]) -> list[BatchLine]:
    """The lines an earlier run has not answered, in file order."""
    return [line for line in lines if line.key not in done_keys]


def run_lines(lines: list[BatchLine], output: OutputFile, runner: BatchRunner,
              progress: Progress) -> RunSummary:
    todo = pending_lines(lines, output.done_keys)
    answered = failed = 0

    def on_answer(answer: Answer) -> None:
        nonlocal answered, failed
        output.write(answer)
        answered += 1
        if not 200 <= answer.status < 300:
            failed += 1
        progress.add(answer.status, answer.output_tokens)

    for line in todo:
        if isinstance(line, BadLine):
            on_answer(refused(line, f"req-{os.urandom(MINTED_ID_BYTES).hex()}"))
    tasks = [line for line in todo if isinstance(line, Task)]
    progress.show()
    left = runner.run(tasks, on_answer)
    progress.finish()
    return RunSummary(total_lines=len(lines), skipped_lines=len(lines) - len(todo),
                      answered_lines=answered, failed_lines=failed, left_lines=left)
