"""A stand-in for `pip download`: copies the wheels of a local folder, records what was asked."""
from __future__ import annotations

import sys
from pathlib import Path

from cli import fetch

COPY_WHEELS = ("import shutil, sys, glob; "
               "[shutil.copy(w, sys.argv[2]) for w in glob.glob(sys.argv[1] + '/*.whl')]")


def fake_pip(monkeypatch, wheel_folder: Path) -> list[str]:
    """Make fetch's pip command copy wheel_folder's wheels; returns the list of the
    requirement strings it is asked for (filled as fetch runs)."""
    asked: list[str] = []

    def command(directory, specs):
        asked.extend(specs)
        return [sys.executable, "-c", COPY_WHEELS, str(wheel_folder), str(directory)]
    monkeypatch.setattr(fetch, "pip_download_command", command)
    return asked
