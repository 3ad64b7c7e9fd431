"""Batch work: a JSONL file of OpenAI batch requests answered by the API application itself.

lines.py (the input lines as tasks or refusals), runner.py (many in flight through the App,
no sockets), output.py (the output lines, resumable), progress.py (the bar or the plain
lines), job.py (one file run to its end). cli/batch.py assembles them for `run-batch`.
"""
