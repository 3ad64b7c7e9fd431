"""A tiny random sentence-transformers BERT folder for tests that need no real weights.

Vocabulary (vocab.txt, lower-cased WordPiece): the five specials, a few words and pieces.
Config: 2 layers, hidden 8, 2 heads, ffn 16, 16 positions; mean pooling + Normalize,
max_seq_length 12. `overrides` replace keys of any of the JSON files to build refusals.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.formats_writers import write_safetensors

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat",
         "play", "##ing", "##s", ".", ",", "a"]
CONFIG = {"model_type": "bert", "architectures": ["BertModel"], "vocab_size": len(VOCAB),
          "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
          "intermediate_size": 16, "max_position_embeddings": 16, "type_vocab_size": 2,
          "layer_norm_eps": 1e-12, "hidden_act": "gelu", "position_embedding_type": "absolute"}
MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
           {"idx": 1, "name": "1", "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling"},
           {"idx": 2, "name": "2", "path": "2_Normalize",
            "type": "sentence_transformers.models.Normalize"}]
POOLING = {"word_embedding_dimension": 8, "pooling_mode_cls_token": False,
           "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
           "pooling_mode_mean_sqrt_len_tokens": False}
SENTENCE = {"max_seq_length": 12, "do_lower_case": False}
TOKENIZER_CONFIG = {"do_lower_case": True, "tokenize_chinese_chars": True,
                    "strip_accents": None, "tokenizer_class": "BertTokenizer"}


def _weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    H, I, V, P = 8, 16, len(VOCAB), 16

    def r(*shape):
        return rng.normal(0.0, 0.5, shape).astype(np.float32)
    tensors = {"embeddings.word_embeddings.weight": r(V, H),
               "embeddings.position_embeddings.weight": r(P, H),
               "embeddings.token_type_embeddings.weight": r(2, H),
               "embeddings.LayerNorm.weight": 1 + r(H), "embeddings.LayerNorm.bias": r(H)}
    for i in range(2):
        p = f"encoder.layer.{i}."
        for name, (n_out, n_in) in {"attention.self.query": (H, H), "attention.self.key": (H, H),
                                    "attention.self.value": (H, H),
                                    "attention.output.dense": (H, H),
                                    "intermediate.dense": (I, H), "output.dense": (H, I)}.items():
            tensors[p + name + ".weight"] = r(n_out, n_in)
            tensors[p + name + ".bias"] = r(n_out)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            tensors[p + norm + ".weight"] = 1 + r(H)
            tensors[p + norm + ".bias"] = r(H)
    return tensors


def write_tiny_bert(directory: Path, seed: int = 0, **overrides: dict) -> Path:
    """The folder; overrides: config=, modules=, pooling=, sentence= (dicts merged/replaced)."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {"config.json": {**CONFIG, **overrides.get("config", {})},
             "modules.json": overrides.get("modules", MODULES),
             "1_Pooling/config.json": {**POOLING, **overrides.get("pooling", {})},
             "sentence_bert_config.json": {**SENTENCE, **overrides.get("sentence", {})},
             "tokenizer_config.json": TOKENIZER_CONFIG}
    for name, value in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(json.dumps(value), encoding="utf-8")
    (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    write_safetensors(directory / "model.safetensors", _weights(seed))
    return directory
