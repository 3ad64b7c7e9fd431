"""Where the default model lives on disk: one answer for the server and the fetch command.

    artifacts/models/smol-135m                    relative to the current directory
    $XDG_DATA_HOME/tl-serve/models/smol-135m      per user (default ~/.local/share/...)

`tlserve fetch-model` writes to one of these (cli/fetch.py) and `[engine].model_dir`
defaults to the first that exists (server/config.py); both read them here, through
`engine.api`, so fetching needs nothing of the server.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

DEFAULT_MODEL_DIR = "artifacts/models/smol-135m"
USER_MODEL_SUBDIR = "tl-serve/models/smol-135m"    # under $XDG_DATA_HOME (~/.local/share)


def user_model_dir(env: Mapping[str, str] | None = None) -> Path:
    """The per-user model folder an installed `tlserve` falls back to:
    `$XDG_DATA_HOME/tl-serve/models/smol-135m` (default `~/.local/share/...`)."""
    env = os.environ if env is None else env
    data = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / USER_MODEL_SUBDIR
