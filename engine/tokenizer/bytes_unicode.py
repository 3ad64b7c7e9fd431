"""The GPT-2 "byte-level" alphabet: one printable Unicode character per byte value.

Byte-level BPE vocabularies (GPT-2, SmolLM2, Llama 3, Qwen2) never store raw bytes. Each of
the 256 byte values is first given a stand-in character, so that every token is a printable
string in `tokenizer.json`: the space byte 0x20 becomes "Ġ" (U+0120), newline 0x0A becomes
"Ċ" (U+010A), and printable ASCII and most of Latin-1 stand for themselves. A vocabulary
entry such as "Ġworld" therefore means the bytes b" world".

The rule: bytes that are already printable (`!`..`~`, `¡`..`¬`, `®`..`ÿ`) keep their own
code point; the remaining 68 bytes (controls, space, DEL, NBSP, soft hyphen, ...) are given
U+0100, U+0101, ... in increasing byte order.

This module is data only: two tables and one translate table. No I/O.
"""
from __future__ import annotations

NUM_BYTE_VALUES = 256
# Where the stand-ins for non-printable bytes start: the first code point past Latin-1.
FIRST_STAND_IN_CODE_POINT = 0x100
# Byte ranges that are printable as themselves (inclusive bounds).
SELF_PRINTABLE_RANGES = ((ord("!"), ord("~")), (ord("¡"), ord("¬")), (ord("®"), ord("ÿ")))


def _build_byte_to_char() -> tuple[str, ...]:
    keeps = {b for lo, hi in SELF_PRINTABLE_RANGES for b in range(lo, hi + 1)}
    chars: list[str] = []
    next_stand_in = FIRST_STAND_IN_CODE_POINT
    for byte in range(NUM_BYTE_VALUES):
        if byte in keeps:
            chars.append(chr(byte))
        else:
            chars.append(chr(next_stand_in))
            next_stand_in += 1
    return tuple(chars)


# BYTE_TO_CHAR[b] is the stand-in character of byte value b.
BYTE_TO_CHAR: tuple[str, ...] = _build_byte_to_char()
# CHAR_TO_BYTE["Ġ"] == 0x20; the inverse of BYTE_TO_CHAR.
CHAR_TO_BYTE: dict[str, int] = {c: b for b, c in enumerate(BYTE_TO_CHAR)}
# For str.translate on a latin-1-decoded byte string: code point b -> BYTE_TO_CHAR[b].
_LATIN1_TO_STAND_IN = {b: c for b, c in enumerate(BYTE_TO_CHAR)}


def text_to_byte_chars(text: str) -> str:
    """'Ġworld' from ' world': the UTF-8 bytes of `text`, one stand-in character each."""
    return text.encode("utf-8").decode("latin-1").translate(_LATIN1_TO_STAND_IN)


def byte_chars_to_bytes(token: str) -> bytes | None:
    """b' world' from 'Ġworld'; None when a character is not in the byte alphabet."""
    try:
        return bytes(CHAR_TO_BYTE[c] for c in token)
    except KeyError:
        return None
