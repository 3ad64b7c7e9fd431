"""What a sentence-embedding model is: BERT's hyper-parameters and the sentence-transformers
pipeline around it, read from a folder's JSON files, refusing what is not implemented.

A sentence-transformers folder says in `modules.json` which modules run in order:
Transformer (the BERT in config.json), Pooling (`1_Pooling/config.json`: which pooling
mode) and optionally Normalize (L2). `sentence_bert_config.json` holds `max_seq_length`
(tokens with [CLS]/[SEP]; MiniLM: 256, below BERT's 512 positions) and `do_lower_case`.

Every value whose maths this engine does not implement -- another module type, a pooling
mode other than mean or CLS, relative position embeddings, a GELU other than erf's, a
decoder or cross-attention BERT -- raises `UnsupportedModel` naming the file and the key,
instead of computing something else quietly.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import ModelFormatError, UnsupportedModel

CONFIG_FILE = "config.json"
MODULES_FILE = "modules.json"
SENTENCE_CONFIG_FILE = "sentence_bert_config.json"
POOLING_CONFIG_FILE = "config.json"          # inside the Pooling module's folder
BERT_MODEL_TYPES = ("bert",)
TRANSFORMER_MODULE = "sentence_transformers.models.Transformer"
POOLING_MODULE = "sentence_transformers.models.Pooling"
NORMALIZE_MODULE = "sentence_transformers.models.Normalize"
POOLING_MEAN = "mean"
POOLING_CLS = "cls"
# pooling config key -> our mode; every other `pooling_mode_*` key must be false.
POOLING_KEYS = {"pooling_mode_mean_tokens": POOLING_MEAN, "pooling_mode_cls_token": POOLING_CLS}
EXACT_GELU_NAMES = ("gelu",)                 # transformers' "gelu" is the exact erf form
# config.json key -> the only value implemented (a missing key means transformers' default)
REQUIRED_VALUES = {"position_embedding_type": "absolute", "is_decoder": False,
                   "add_cross_attention": False}


@dataclass(frozen=True)
class BertConfig:
    """BERT's hyper-parameters (config.json)."""
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


@dataclass(frozen=True)
class SentencePipeline:
    """The sentence-transformers modules around the Transformer."""
    max_seq_length: int          # tokens per input, [CLS] and [SEP] included
    pooling: str                 # POOLING_MEAN or POOLING_CLS
    normalize: bool              # L2-normalise the pooled vector
    lowercase_text: bool         # sentence_bert_config's do_lower_case (before tokenizing)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelFormatError(path, f"cannot read JSON: {error}") from None


def is_bert_folder(directory: Path) -> bool:
    """A folder whose config.json says model_type bert (the encoder's, not a chat model).
    An unreadable config.json is not one: the chat loader then reports it in its words."""
    config = directory / CONFIG_FILE
    if not config.is_file():
        return False
    try:
        value = read_json(config)
    except ModelFormatError:
        return False
    return isinstance(value, dict) and value.get("model_type") in BERT_MODEL_TYPES


def bert_config_from(directory: Path) -> BertConfig:
    path = directory / CONFIG_FILE
    raw = read_json(path)
    if not isinstance(raw, dict) or raw.get("model_type") not in BERT_MODEL_TYPES:
        raise UnsupportedModel(path, f"model_type {raw.get('model_type')!r} is not bert")
    for key, implemented in REQUIRED_VALUES.items():
        if key in raw and raw[key] != implemented:
            raise UnsupportedModel(path, f"{key} {raw[key]!r} is not implemented "
                                         f"(only {implemented!r})")
    if raw.get("hidden_act", "gelu") not in EXACT_GELU_NAMES:
        raise UnsupportedModel(path, f"hidden_act {raw['hidden_act']!r} is not implemented "
                                     f"(only the exact erf GELU, 'gelu')")
    try:
        config = BertConfig(
            vocab_size=int(raw["vocab_size"]), hidden_size=int(raw["hidden_size"]),
            num_layers=int(raw["num_hidden_layers"]), num_heads=int(raw["num_attention_heads"]),
            intermediate_size=int(raw["intermediate_size"]),
            max_position_embeddings=int(raw["max_position_embeddings"]),
            type_vocab_size=int(raw.get("type_vocab_size", 2)),
            layer_norm_eps=float(raw.get("layer_norm_eps", 1e-12)))
    except (KeyError, TypeError, ValueError) as error:
        raise ModelFormatError(path, f"missing or malformed key: {error}") from None
    if config.hidden_size % config.num_heads:
        raise ModelFormatError(path, f"hidden_size {config.hidden_size} is not a multiple of "
                                     f"num_attention_heads {config.num_heads}")
    return config


def pipeline_from(directory: Path, config: BertConfig) -> SentencePipeline:
    """modules.json and the modules' files -> the pooling, normalisation and length."""
    path = directory / MODULES_FILE
    if not path.is_file():
        raise UnsupportedModel(path, "missing: without sentence-transformers' modules.json "
                                     "the pooling is unknown")
    modules = read_json(path)
    kinds = [m.get("type") for m in modules] if isinstance(modules, list) else None
    if kinds not in ([TRANSFORMER_MODULE, POOLING_MODULE],
                     [TRANSFORMER_MODULE, POOLING_MODULE, NORMALIZE_MODULE]):
        raise UnsupportedModel(path, f"modules {kinds!r}: only Transformer, Pooling "
                                     f"[, Normalize] are implemented")
    pooling = _pooling_mode(directory / modules[1].get("path", "") / POOLING_CONFIG_FILE, config)
    sentence = directory / SENTENCE_CONFIG_FILE
    st_config = read_json(sentence) if sentence.is_file() else {}
    max_len = int(st_config.get("max_seq_length") or config.max_position_embeddings)
    if not 2 <= max_len <= config.max_position_embeddings:
        raise ModelFormatError(sentence, f"max_seq_length {max_len} is not within 2.."
                                         f"{config.max_position_embeddings} (the positions)")
    return SentencePipeline(max_seq_length=max_len, pooling=pooling,
                            normalize=len(kinds) == 3,
                            lowercase_text=bool(st_config.get("do_lower_case", False)))


def _pooling_mode(path: Path, config: BertConfig) -> str:
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise ModelFormatError(path, "not a JSON object")
    chosen = [key for key, value in raw.items() if key.startswith("pooling_mode") and value]
    if len(chosen) != 1 or chosen[0] not in POOLING_KEYS:
        raise UnsupportedModel(path, f"pooling {chosen!r} is not implemented (exactly one of "
                                     f"{', '.join(POOLING_KEYS)})")
    dim = raw.get("word_embedding_dimension", config.hidden_size)
    if dim != config.hidden_size:
        raise ModelFormatError(path, f"word_embedding_dimension {dim} is not the model's "
                                     f"hidden_size {config.hidden_size}")
    return POOLING_KEYS[chosen[0]]
