"""Tiny, deterministic test models, written with the project's own writers.

* `write_succ_model(dir)`: the worked example's `succ` bigram ("after byte i, byte i+1") as a
  Llama with ZERO layers in Hugging Face layout: vocab 257 (256 bytes + `<|endoftext|>`),
  hidden size 257, identity embedding, unit final norm and an LM head that puts a logit of
  about `SUCC_LOGIT` on byte (i+1) % 256 (0 elsewhere, `-SUCC_EOS_PENALTY` on the EOS),
  so greedy decoding is unambiguous while sampling at temperature 1 still varies with the
  seed (p(top) ~ 0.6). The byte tokenizer is named in tokenizer_config.json (no
  tokenizer.json) together with the one-line template.
* `write_tiny_llama(dir)`: a random 2-layer Llama (d=64, 4 heads, 2 KV heads, head_dim 16,
  ff 128, untied LM head) with a byte-level BPE tokenizer (256 byte tokens in byte order, a
  few merges, `<|endoftext|>` as EOS) as tokenizer.json, safetensors weights.
* `write_tiny_llama_gguf(path)`: the same weights as a GGUF: Q/K rows permuted the way
  llama.cpp's converter does, matrices stored as Q8_0 or Q4_1 (`TINY_GGUF_TYPES`), the
  tokenizer as `tokenizer.ggml.*` metadata.

`tiny_llama_tensors()` gives the float32 weights (HF names, output-major) the files hold.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engine.formats.gguf import ValueType
from engine.tokenizer.bytes_unicode import BYTE_TO_CHAR
from engine.model.weights import permute_rows
from tests.formats_writers import Typed, write_gguf, write_safetensors

SUCC_VOCAB = 257
SUCC_EOS_ID = 256
SUCC_LOGIT = 6.0            # top logit (others 0): greedy is clear, sampling still varies
SUCC_EOS_PENALTY = 10.0     # the EOS logit: sampling (almost) never ends a succ answer
SUCC_TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"
SUCC_EPS = 1e-5
EOS_TEXT = "<|endoftext|>"

TINY_SEED = 1234
TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "vocab_size": 0,                      # filled from the tokenizer below
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "max_position_embeddings": 512,
    "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": None,
}
TINY_MERGES = [("Ġ", "t"), ("h", "e"), ("i", "n"), ("Ġt", "he"), ("e", "r"), ("o", "n"),
               ("Ġ", "a"), ("r", "e")]
# HF role suffix -> GGUF tensor type (both quantizers, both Q/K orders get exercised)
TINY_GGUF_TYPES = {"q_proj": "Q8_0", "k_proj": "Q4_1", "v_proj": "Q4_1", "o_proj": "Q8_0",
                   "gate_proj": "Q4_1", "up_proj": "Q8_0", "down_proj": "Q4_1",
                   "embed_tokens": "Q8_0", "lm_head": "Q8_0"}
HF_TO_GGUF = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
              "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
              "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def _write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=1, ensure_ascii=False), encoding="utf-8")


# --- succ ------------------------------------------------------------------------------

def succ_lm_head() -> np.ndarray:
    """lm_head.weight [V, d] (output-major): after byte i, byte (i+1) % 256 wins."""
    scale = np.sqrt(SUCC_VOCAB)          # the RMSNorm turns a one-hot row into sqrt(d) * e_i
    head = np.zeros((SUCC_VOCAB, SUCC_VOCAB), np.float32)
    inputs = np.arange(SUCC_VOCAB)
    following = np.append((inputs[:256] + 1) % 256, 0)           # after the EOS: byte 0
    head[following, inputs] = SUCC_LOGIT / scale                  # [next, current]
    head[SUCC_EOS_ID, :] = -SUCC_EOS_PENALTY / scale
    return head


def write_succ_model(directory: Path) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _write_json(directory / "config.json", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": SUCC_VOCAB, "hidden_size": SUCC_VOCAB, "intermediate_size": 1,
        "num_hidden_layers": 0, "num_attention_heads": 1, "num_key_value_heads": 1,
        "head_dim": 2, "rope_theta": 10000.0, "rms_norm_eps": SUCC_EPS,
        "max_position_embeddings": 1024, "tie_word_embeddings": False,
        "bos_token_id": None, "eos_token_id": SUCC_EOS_ID})
    _write_json(directory / "tokenizer_config.json", {
        "tokenizer_class": "ByteTokenizer", "special_tokens": [EOS_TEXT],
        "eos_token": EOS_TEXT, "bos_token": None, "chat_template": SUCC_TEMPLATE})
    write_safetensors(directory / "model.safetensors", {
        "model.embed_tokens.weight": np.eye(SUCC_VOCAB, dtype=np.float32),
        "model.norm.weight": np.ones(SUCC_VOCAB, np.float32),
        "lm_head.weight": succ_lm_head()})
    return directory


# --- tiny Llama: tokenizer -------------------------------------------------------------

def byte_chars() -> list[str]:
    """GPT-2's printable stand-in character for each byte 0..255."""
    return list(BYTE_TO_CHAR)


def tiny_vocab() -> list[str]:
    """Token strings by id: 256 bytes (byte order), the merges' results, then the EOS."""
    return byte_chars() + [a + b for a, b in TINY_MERGES] + [EOS_TEXT]


def tiny_tokenizer_json() -> dict:
    vocab = tiny_vocab()
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": len(vocab) - 1, "content": EOS_TEXT, "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False,
                          "special": True}],
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {tok: i for i, tok in enumerate(vocab[:-1])},
                  "merges": [list(m) for m in TINY_MERGES]},
    }


def tiny_config() -> dict:
    vocab = len(tiny_vocab())
    return {**TINY_CONFIG, "vocab_size": vocab, "eos_token_id": vocab - 1}


# --- tiny Llama: weights ---------------------------------------------------------------

def tiny_llama_tensors(seed: int = TINY_SEED) -> dict[str, np.ndarray]:
    """HF-named float32 weights, output-major. Scaled ~1/sqrt(fan_in) so signals survive
    both layers and the greedy next token depends on the prompt."""
    cfg = tiny_config()
    rng = np.random.default_rng(seed)
    d, ff, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv, vocab = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd, cfg["vocab_size"]

    def mat(out_dim: int, in_dim: int, gain: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((out_dim, in_dim)) * gain / np.sqrt(in_dim)).astype(np.float32)

    def norm() -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32)

    t = {"model.embed_tokens.weight": rng.standard_normal((vocab, d)).astype(np.float32)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": norm(),
                  p + "self_attn.q_proj.weight": mat(q, d, 2.0),
                  p + "self_attn.k_proj.weight": mat(kv, d, 2.0),
                  p + "self_attn.v_proj.weight": mat(kv, d),
                  p + "self_attn.o_proj.weight": mat(d, q),
                  p + "post_attention_layernorm.weight": norm(),
                  p + "mlp.gate_proj.weight": mat(ff, d),
                  p + "mlp.up_proj.weight": mat(ff, d),
                  p + "mlp.down_proj.weight": mat(d, ff)})
    t["model.norm.weight"] = norm()
    t["lm_head.weight"] = mat(vocab, d, 4.0)
    return t


def write_tiny_llama(directory: Path) -> Path:
    """The HF safetensors layout (config.json, model.safetensors, tokenizer files)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    _write_json(directory / "config.json", tiny_config())
    _write_json(directory / "tokenizer.json", tiny_tokenizer_json())
    _write_json(directory / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS_TEXT,
        "bos_token": None, "add_bos_token": False, "add_eos_token": False})
    _write_json(directory / "generation_config.json", {"eos_token_id": tiny_config()["eos_token_id"]})
    write_safetensors(directory / "model.safetensors", tiny_llama_tensors())
    return directory


def gguf_name(hf_name: str) -> str:
    """HF tensor name -> llama.cpp's GGUF name."""
    fixed = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    if hf_name in fixed:
        return fixed[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    return f"blk.{layer}.{HF_TO_GGUF[rest.removesuffix('.weight')]}.weight"


def role(hf_name: str) -> str:
    """"model.layers.0.self_attn.q_proj.weight" -> "q_proj"."""
    return hf_name.removesuffix(".weight").rsplit(".", 1)[-1]


def gguf_type(hf_name: str) -> str:
    return TINY_GGUF_TYPES.get(role(hf_name), "F32")


def tiny_gguf_metadata() -> dict:
    cfg = tiny_config()
    vocab = tiny_vocab()
    return {
        "general.architecture": "llama", "general.name": "tiny-llama",
        "llama.block_count": cfg["num_hidden_layers"],
        "llama.context_length": cfg["max_position_embeddings"],
        "llama.embedding_length": cfg["hidden_size"],
        "llama.feed_forward_length": cfg["intermediate_size"],
        "llama.attention.head_count": cfg["num_attention_heads"],
        "llama.attention.head_count_kv": cfg["num_key_value_heads"],
        "llama.attention.key_length": cfg["head_dim"],
        "llama.rope.dimension_count": cfg["head_dim"],
        "llama.rope.freq_base": cfg["rope_theta"],
        "llama.attention.layer_norm_rms_epsilon": cfg["rms_norm_eps"],
        "llama.vocab_size": cfg["vocab_size"],
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt2",
        "tokenizer.ggml.tokens": vocab,
        "tokenizer.ggml.token_type": Typed(ValueType.ARRAY, [1] * (len(vocab) - 1) + [3],
                                           ValueType.INT32),
        "tokenizer.ggml.merges": [f"{a} {b}" for a, b in TINY_MERGES],
        "tokenizer.ggml.eos_token_id": cfg["eos_token_id"],
        "tokenizer.ggml.add_bos_token": False,
    }


def tiny_gguf_tensors(type_of=gguf_type) -> dict:
    """The tiny Llama's tensors as llama.cpp stores them: GGUF names, Q/K rows permuted
    for adjacent-pair RoPE, each with the ggml type `type_of(hf_name)` chooses."""
    cfg = tiny_config()
    heads = {"q_proj": cfg["num_attention_heads"], "k_proj": cfg["num_key_value_heads"]}
    tensors = {}
    for name, w in tiny_llama_tensors().items():
        if role(name) in heads:
            w = permute_rows(w, heads[role(name)])
        tensors[gguf_name(name)] = (w, type_of(name))
    return tensors


def write_tiny_llama_gguf(path: Path) -> Path:
    """The same weights as one GGUF file (Q/K permuted, Q8_0/Q4_1 matrices, F32 norms)."""
    tensors = tiny_gguf_tensors()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_gguf(path, tiny_gguf_metadata(), tensors)
