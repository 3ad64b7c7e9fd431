"""Tokenizers: text <-> token ids, and the exact bytes of every token.

  - `ByteTokenizer`: 256 byte ids plus named specials (byte.py), the teaching baseline.
  - `BPETokenizer`: byte-level BPE from tokenizer.json or GGUF metadata (bpe.py).

Both share `base.Tokenizer`'s interface: `encode(text, *, parse_special=True)`,
`decode(ids, *, skip_special_tokens=False)`, `token_bytes(id)`, `id_to_token(id)`,
`token_to_id(str)`, `vocab_size`, `bos_token_id`, `eos_token_ids`, `bos_token`,
`eos_token`, `special_ids`. Pure functions of their input: no I/O after loading.
"""
from engine.tokenizer.base import (
    AddedToken, Tokenizer, TokenizerError, TokenizerLoadError, UnknownTokenIdError)
from engine.tokenizer.bpe import BPETokenizer
from engine.tokenizer.byte import ByteTokenizer

__all__ = [
    "AddedToken", "BPETokenizer", "ByteTokenizer", "Tokenizer", "TokenizerError",
    "TokenizerLoadError", "UnknownTokenIdError",
]
