"""Tokenizers: text <-> token ids, and the exact bytes of every token.

  - `ByteTokenizer`: 256 byte ids plus named specials (byte.py), the teaching baseline.
  - `BPETokenizer`: byte-level BPE from tokenizer.json or GGUF metadata (bpe.py).
  - `SentencePieceBPE`: character BPE with "▁" spaces and byte fallback (spm.py: Gemma).
  - `tokenizer_from_gguf_metadata` / `tokenizer_from_json` pick the class a file asks for.

All share `base.Tokenizer`'s interface: `encode(text, *, parse_special=True,
add_special_tokens=False)`, `decode(ids, *, skip_special_tokens=False)`, `add_bos_token`,
`token_bytes(id)`, `id_to_token(id)`, `token_to_id(str)`, `vocab_size`, `bos_token_id`,
`eos_token_ids`, `bos_token`, `eos_token`, `special_ids`. Pure functions of their input:
no I/O after loading.
"""
from engine.tokenizer.base import (
    AddedToken, Tokenizer, TokenizerError, TokenizerLoadError, UnknownTokenIdError)
from engine.tokenizer.bpe import BPETokenizer
from engine.tokenizer.byte import ByteTokenizer
from engine.tokenizer.choose import tokenizer_from_gguf_metadata, tokenizer_from_json
from engine.tokenizer.spm import SentencePieceBPE

__all__ = [
    "AddedToken", "BPETokenizer", "ByteTokenizer", "SentencePieceBPE", "Tokenizer",
    "TokenizerError", "TokenizerLoadError", "UnknownTokenIdError",
    "tokenizer_from_gguf_metadata", "tokenizer_from_json",
]
