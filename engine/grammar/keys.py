"""Each key once per object: the check beside the automaton that it cannot make itself.

A character automaton forbids a repeated key only where it knows every key: a schema's
declared properties are written in order, each at most once. Over an open set of keys
(`json_object` mode, the members `additionalProperties` admits, `{"type": "object"}` with no
properties) it would need a state per set of keys seen, so a small model at temperature 0
could write `"role": "user", "role": "user", ...` until its token limit. `KeyCursor` reads the
JSON text beside the automaton and keeps, for every object open at the cursor, the keys
written in it; a token that would close a key its object already has is refused
(`repeats`: `Constraint.allows`, its mask and its forced drafts ask it). In objects whose keys
are all declared the check never fires, so the accepted language changes only where keys
are open.

Where the JSON starts (`KeyRule`): a JSON grammar's text is JSON from its first byte; a
tool-call answer is calls once it begins with its format's trigger (under `tool_choice:
auto` an answer that does not is free text, never checked); a thinking prefix is skipped to
its closing tag. Between the calls stands markup (`<tool_call>`, `[TOOL_CALLS]`) with no
quote or brace in it, which the reader passes over. Keys are compared as written, escapes
and all (`"a"` and `"\\u0061"` count as two keys: a model writes one spelling).
"""
from __future__ import annotations

from dataclasses import dataclass

QUOTE, BACKSLASH, COMMA, COLON, OPEN_BRACE = ord('"'), ord("\\"), ord(","), ord(":"), ord("{")
OPENERS, CLOSERS = frozenset(b"{["), frozenset(b"}]")
SPACE_BYTES = b" \t\r\n"

# Phases of the text: where the reasoning may open, inside it, the newlines after it,
# before the trigger is whole, reading JSON, or free text that is never checked.
THINK_START, THINKING, AFTER_THINK, LEAD, JSON, OFF = range(6)


@dataclass(frozen=True)
class KeyRule:
    """Where a grammar's checked JSON begins. `trigger`: the text an answer must begin with
    to be calls ("" : JSON from the start); `think_open` / `think_close`: the reasoning's
    tags when the model may think first ("": it may not); `inside`: the prompt opened the
    reasoning already."""
    trigger: bytes = b""
    think_open: bytes = b""
    think_close: bytes = b""
    inside: bool = False


class KeyCursor:
    """One sequence's reading of its JSON: the open containers (an object's keys so far, or
    None for an array) and the string being written. `feed` moves it over written bytes;
    `repeats` says, without moving it, whether bytes would close a repeated key."""
    __slots__ = ("rule", "phase", "lead", "frames", "in_string", "is_key", "escaped", "key",
                 "expect_key")

    def __init__(self, rule: KeyRule):
        self.rule = rule
        self.phase = THINK_START if rule.think_close else LEAD
        if rule.inside:
            self.phase = THINKING
        self.lead = b""                        # the tag or trigger bytes matched so far
        self.frames: list[set[bytes] | None] = []
        self.in_string = self.is_key = self.escaped = self.expect_key = False
        self.key = b""                         # the key being written (its raw bytes)

    @property
    def watching(self) -> bool:
        """Some open object has a key, so some token could repeat one."""
        return self.phase == JSON and any(self.frames)

    def feed(self, data: bytes) -> None:
        self._walk(data, commit=True)

    def repeats(self, data: bytes) -> bool:
        """Would writing `data` close a key that its object already has?"""
        if self.phase != JSON or QUOTE not in data:
            return False                       # only a closing quote can repeat a key
        return self._walk(data, commit=False)

    def _walk(self, data: bytes, commit: bool) -> bool:
        """Read `data`; True at the first repeated key (the cursor then unmoved). With
        `commit` false the cursor is only read: the frame list is copied, and a frame that
        gains a key gets a new set."""
        phase, lead = self.phase, self.lead
        frames = self.frames if commit else list(self.frames)
        in_string, is_key, escaped, key, expect = (self.in_string, self.is_key, self.escaped,
                                                   self.key, self.expect_key)
        pos = 0
        while pos < len(data) and phase != OFF:
            byte = data[pos]
            pos += 1
            if phase != JSON:
                phase, lead, replay = self._lead(phase, lead, byte)
                if replay:                         # read again in the new phase
                    data, pos = replay + data[pos:], 0
                continue
            if in_string:
                if escaped:
                    escaped = False
                elif byte == BACKSLASH:
                    escaped = True
                elif byte == QUOTE:
                    in_string = False
                    if is_key:
                        if key in frames[-1]:
                            return True
                        if commit:
                            frames[-1].add(key)
                        else:
                            frames[-1] = frames[-1] | {key}
                        is_key = False
                    continue
                if is_key:
                    key += bytes((byte,))
                continue
            if byte == QUOTE:
                in_string, key = True, b""
                is_key, expect = expect, False
            elif byte in OPENERS:
                frames.append(set() if byte == OPEN_BRACE else None)
                expect = byte == OPEN_BRACE
            elif byte in CLOSERS:
                if frames:
                    frames.pop()
                expect = False
            elif byte == COMMA:
                expect = bool(frames) and frames[-1] is not None
            elif byte == COLON:
                expect = False
        if commit:
            self.phase, self.lead = phase, lead
            self.in_string, self.is_key, self.escaped, self.key, self.expect_key = \
                in_string, is_key, escaped, key, expect
        return False

    def _lead(self, phase: int, lead: bytes, byte: int) -> tuple[int, bytes, bytes]:
        """One byte before the JSON: (the phase after it, the tag or trigger bytes matched,
        the bytes to read again in that phase: where a tag turned out not to be one, or the
        trigger that opens the JSON)."""
        rule, one = self.rule, bytes((byte,))
        if phase == THINK_START:                   # spaces, then the opening tag or the answer
            if not lead and byte in SPACE_BYTES:
                return phase, b"", b""
            if rule.think_open.startswith(lead + one):
                lead += one
                return (THINKING, b"", b"") if lead == rule.think_open else (phase, lead, b"")
            return LEAD, b"", lead + one           # no reasoning: the answer starts here
        if phase == THINKING:                      # until the closing tag
            lead = (lead + one)[-len(rule.think_close):]
            return (AFTER_THINK, b"", b"") if lead == rule.think_close else (phase, lead, b"")
        if phase == AFTER_THINK:                   # the newlines after the closing tag
            return (phase, b"", b"") if byte == 0x0A else (LEAD, b"", one)
        if not rule.trigger:                       # LEAD: a JSON grammar's text is JSON
            return JSON, b"", one
        lead += one
        if lead == rule.trigger:
            return JSON, b"", lead
        return (LEAD, lead, b"") if rule.trigger.startswith(lead) else (OFF, b"", b"")

    def copy(self) -> "KeyCursor":
        """An independent cursor at the same place (the forced drafts walk one ahead)."""
        twin = KeyCursor(self.rule)
        twin.phase, twin.lead = self.phase, self.lead
        twin.frames = [None if keys is None else set(keys) for keys in self.frames]
        twin.in_string, twin.is_key, twin.escaped, twin.key, twin.expect_key = (
            self.in_string, self.is_key, self.escaped, self.key, self.expect_key)
        return twin
