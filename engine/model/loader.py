"""`load_model(path) -> Model`: a model directory or a .gguf file, ready to run.

Accepted layouts:

* a `.gguf` file, or a directory holding exactly one `.gguf` (weights, config, tokenizer
  and chat template all come from the file's metadata);
* a Hugging Face directory: `config.json`, one or more `*.safetensors`, `tokenizer.json`
  (or, for our byte-tokenizer test models, a `tokenizer_config.json` whose
  `tokenizer_class` is `ByteTokenizer`), `tokenizer_config.json`, optionally
  `generation_config.json` and `chat_template.jinja`.

The chat template is the first found of: `generation_config.json` "chat_template",
`tokenizer_config.json` "chat_template", `chat_template.jinja`, the GGUF's
`tokenizer.chat_template`; else None (the server's plain default). It is returned as source
text: parsing it is the template package's job (the engine never imports `template`).

End-of-sequence ids are the union of the config's, generation_config.json's and the
tokenizer's. The model's name is its directory's name (a trailing version folder such as
`v3` is skipped: `.../smol-135m/v3` is `smol-135m`).

Problems with any file raise `ModelFormatError` naming it.

A BERT sentence-transformers folder (config.json `model_type` "bert": all-MiniLM-L6-v2) is
not a chat model: `load_model` refuses it with `UnsupportedModel` pointing at
`load_encoder` (engine/encoder/), and `model_kind(path)` tells a caller which of the two
loaders a path wants before it loads anything.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from engine.encoder.spec import is_bert_folder
from engine.errors import ModelFormatError, UnsupportedModel
from engine.formats.gguf import GGUFFile
from engine.model.families import gguf_qk_permuted, hf_norm_offset
from engine.model.spec import LlamaWeights, Model, ModelConfig
from engine.formats.safetensors import read_safetensors_dir
from engine.model.weights import (GGUF_NAMES, TensorSource, as_ids, build_weights,
                                  config_from_gguf, config_from_hf, hf_role_names)

VERSION_DIR = re.compile(r"v\d+(\.\d+)*")
TEMPLATE_FILE = "chat_template.jinja"
# Turn-ending tokens of the chat formats served (Gemma, Llama 3, ChatML/Qwen, Phi-3).
END_OF_TURN_TOKENS = ("<end_of_turn>", "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>")
DEFAULT_TEMPLATE_NAME = "default"       # tokenizer_config may hold a list of named templates
KIND_CHAT = "chat"                      # load_model: a decoder that generates tokens
KIND_EMBEDDING = "embedding"            # load_encoder: a sentence-embedding encoder


def load_model(path: str | os.PathLike) -> Model:
    """Load a model from a .gguf file or a model directory (see the module docstring)."""
    path = Path(path)
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelFormatError(path, "not a .gguf file or a model directory")
        return _load_gguf(path, path.parent)
    if not path.is_dir():
        raise ModelFormatError(path, "no such file or directory")
    if is_bert_folder(path):
        raise UnsupportedModel(path / "config.json", "a BERT sentence-embedding model, not a "
                                                     "chat model: load it with load_encoder")
    if (path / "config.json").is_file():
        return _load_hf(path)
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return _load_gguf(ggufs[0], path)
    if ggufs:
        names = ", ".join(p.name for p in ggufs)
        raise ModelFormatError(path, f"several .gguf files ({names}); pass one of them")
    raise ModelFormatError(path, "no config.json and no .gguf file: not a model directory")


def model_kind(path: str | os.PathLike) -> str:
    """KIND_EMBEDDING for a BERT sentence-embedding folder (load_encoder), else KIND_CHAT
    (load_model, which checks the rest)."""
    path = Path(path)
    return KIND_EMBEDDING if path.is_dir() and is_bert_folder(path) else KIND_CHAT


def model_name(directory: str | os.PathLike) -> str:
    """The model's name: its directory's name, a trailing version folder (`v3`, `v1.2`)
    skipped. The server's default model id (server/config.py) is this name too."""
    directory = Path(directory).resolve()
    if VERSION_DIR.fullmatch(directory.name) and directory.parent.name:
        return directory.parent.name
    return directory.name


# --- the two formats -------------------------------------------------------------------

def load_gguf_weights(file: str | os.PathLike) -> tuple[ModelConfig, LlamaWeights]:
    """A .gguf file's config and weights alone, without its tokenizer (what the maths needs:
    tests and benchmarks of a family whose vocabulary is read elsewhere)."""
    gguf = GGUFFile(Path(file))
    return _gguf_config_weights(gguf)


def _gguf_config_weights(gguf: GGUFFile) -> tuple[ModelConfig, LlamaWeights]:
    embed = gguf.tensors.get(GGUF_NAMES["embed"])
    config = config_from_gguf(gguf.metadata, gguf.path, embed.shape[0] if embed else 0)
    source = TensorSource(path=gguf.path,
                          shapes={n: t.shape for n, t in gguf.tensors.items()},
                          get=gguf.tensor, get_input_major=gguf.matrix_input_major,
                          role_names=GGUF_NAMES,
                          is_gguf_permuted=gguf_qk_permuted(config.options))
    return build_weights(source, config)


def _load_gguf(file: Path, directory: Path) -> Model:
    gguf = GGUFFile(file)
    config, weights = _gguf_config_weights(gguf)
    tokenizer = _guarded(gguf.path, _bpe_from_gguf, gguf.metadata)
    generation = _read_json(directory / "generation_config.json")
    if "eos_token_id" not in generation:         # a GGUF alone: its chat's end-of-turn too
        generation = {**generation, "eos_token_id": _end_of_turn_ids(tokenizer)}
    template = _side_template(directory, generation) or gguf.metadata.get("tokenizer.chat_template")
    return _finish(directory, config, weights, tokenizer, template, file, "gguf", generation)


def _load_hf(directory: Path) -> Model:
    config = config_from_hf(_read_json(directory / "config.json"), str(directory / "config.json"))
    files = read_safetensors_dir(directory)
    shapes = {n: f.header[n]["shape"] for n, f in files.items()}
    source = TensorSource(path=str(directory), shapes=shapes,
                          get=lambda name: files[name].tensor(name),
                          get_input_major=lambda parts: _fused_t(files, parts),
                          role_names=hf_role_names(config.options.family, shapes),
                          is_gguf_permuted=False,
                          norm_offset=hf_norm_offset(config.options))
    config, weights = build_weights(source, config)
    tokenizer_config = _read_json(directory / "tokenizer_config.json")
    tokenizer = _hf_tokenizer(directory, tokenizer_config)
    generation = _read_json(directory / "generation_config.json")
    template = _side_template(directory, generation, tokenizer_config)
    return _finish(directory, config, weights, tokenizer, template, directory, "safetensors",
                   generation)


def _end_of_turn_ids(tokenizer) -> list[int]:
    """The vocabulary's end-of-turn tokens. A GGUF names one EOS (Gemma: `<eos>`), but its chat
    ends turns with another token (`<end_of_turn>`), which Hugging Face's generation_config and
    llama.cpp's end-of-generation list both stop on; without it a chat runs to max_tokens."""
    found = (tokenizer.token_to_id(text) for text in END_OF_TURN_TOKENS)
    return [token_id for token_id in found if token_id is not None]


def _fused_t(files: dict, parts: list[tuple[str, np.ndarray | None]]) -> np.ndarray:
    """[out_i, in] safetensors matrices (rows in the given order) -> float32 [in, sum(out_i)]."""
    mats = []
    for name, order in parts:
        matrix = files[name].tensor(name)                       # [out_i, in]
        mats.append(matrix if order is None else matrix[order])
    stacked = mats[0] if len(mats) == 1 else np.concatenate(mats)   # [sum(out_i), in]
    return np.ascontiguousarray(stacked.T, dtype=np.float32)       # [in, sum(out_i)]


def _finish(directory: Path, config: ModelConfig, weights, tokenizer, template: str | None,
            source: Path, fmt: str, generation: dict) -> Model:
    eos = set(config.eos_token_ids) | set(getattr(tokenizer, "eos_token_ids", ()) or ())
    eos |= set(as_ids(generation.get("eos_token_id")))
    bos = config.bos_token_id
    if bos is None:
        bos = getattr(tokenizer, "bos_token_id", None)
    config = dataclasses.replace(config, eos_token_ids=tuple(sorted(eos)), bos_token_id=bos)
    return Model(name=model_name(directory), config=config, weights=weights,
                 tokenizer=tokenizer, chat_template=template,
                 source_path=str(source), extra={"format": fmt})


# --- tokenizers ------------------------------------------------------------------------

def _guarded(path: str, build, *args):
    """Run a tokenizer constructor; its load errors become ModelFormatError(path, ...)."""
    from engine.tokenizer.base import TokenizerError
    try:
        return build(*args)
    except (TokenizerError, KeyError, ValueError, TypeError) as e:
        if isinstance(e, ModelFormatError):
            raise
        raise ModelFormatError(path, f"bad tokenizer: {e}") from None


def _bpe_from_gguf(metadata: dict):
    from engine.tokenizer.choose import tokenizer_from_gguf_metadata
    return tokenizer_from_gguf_metadata(metadata)


def _byte_tokenizer(tc: dict):
    from engine.tokenizer.byte import ByteTokenizer
    specials = tuple(tc.get("special_tokens", ("<|endoftext|>",)))
    return ByteTokenizer(specials, bos_token=tc.get("bos_token"),
                         eos_token=tc.get("eos_token"))


def _bpe_from_json(path: Path, tc: dict):
    from engine.tokenizer.choose import tokenizer_from_json
    return tokenizer_from_json(path, tc or None)


def _hf_tokenizer(directory: Path, tc: dict):
    if tc.get("tokenizer_class") == "ByteTokenizer":
        return _guarded(str(directory / "tokenizer_config.json"), _byte_tokenizer, tc)
    tj = directory / "tokenizer.json"
    if not tj.is_file():
        raise ModelFormatError(directory, "no tokenizer.json (and tokenizer_config.json does "
                                          "not name the ByteTokenizer)")
    return _guarded(str(tj), _bpe_from_json, tj, tc)


# --- small file helpers ----------------------------------------------------------------

def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a file; {} when the file does not exist."""
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelFormatError(path, f"not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ModelFormatError(path, "not a JSON object")
    return value


def _template_value(value) -> str | None:
    """A chat_template entry: a string, or HF's list of {"name", "template"} (take default)."""
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        value = named.get(DEFAULT_TEMPLATE_NAME)
    return value if isinstance(value, str) and value else None


def _side_template(directory: Path, generation: dict,
                   tokenizer_config: dict | None = None) -> str | None:
    """The template beside the weights; tokenizer_config None: read it only if needed."""
    found = _template_value(generation.get("chat_template"))
    if found:
        return found
    if tokenizer_config is None:
        tokenizer_config = _read_json(directory / "tokenizer_config.json")
    found = _template_value(tokenizer_config.get("chat_template"))
    if found:
        return found
    jinja = directory / TEMPLATE_FILE
    return jinja.read_text(encoding="utf-8") if jinja.is_file() else None
