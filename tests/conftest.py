"""Shared fixtures: the test models (written once per session) and the paths they live at.

* `real_model_dir`: the repository's artifacts/models/smol-135m after
  `cli.fetch.ensure_model()` (instant when the model is already there; a download
  otherwise, as `fetch-model` run from the repository root would do).
* `real_model`: that model loaded once per session (float32 weights: ~0.6 s and 540 MB).
* `minilm_dir`: artifacts/models/all-minilm-l6-v2, the sentence-embedding folder
  (`fetch-model all-minilm-l6-v2`, fetched once like smol).
* The oracle's paths and reader live in tests/oracle.py.
* `succ_model_dir`, `tiny_llama_dir` (HF safetensors layout), `tiny_llama_gguf` (a .gguf
  path): written by tests/models.py under a session temporary directory.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests import models
from tests.oracle import REPO_ROOT


@pytest.fixture(scope="session")
def real_model_dir() -> Path:
    from cli.fetch import DEFAULT_DEST, ensure_model
    return ensure_model(REPO_ROOT / DEFAULT_DEST)


@pytest.fixture(scope="session")
def real_model(real_model_dir):
    from engine.api import load_model
    return load_model(real_model_dir)


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    from cli.fetch import MINILM, ensure_model
    return ensure_model(REPO_ROOT / MINILM.default_dest, model=MINILM.name)


@pytest.fixture(scope="session")
def succ_model_dir(tmp_path_factory) -> Path:
    return models.write_succ_model(tmp_path_factory.mktemp("models") / "succ")


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    return models.write_tiny_llama(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_llama_gguf(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("models") / "tiny-llama-gguf"
    return models.write_tiny_llama_gguf(directory / "tiny-llama.Q8_0-Q4_1.gguf")
