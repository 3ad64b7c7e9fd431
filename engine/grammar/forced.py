"""Grammar-forced drafts: the text the automaton forces next, as the model's own tokens.

With a JSON Schema or a tool call, long stretches of text are decided by the grammar alone:
the keys of a required object in order, `{"name": "get_weather", "arguments": {`, an enum
value once its prefix picks it, a `const`, closing brackets. Speculation (engine/core/drafts/) drafts
them so the model verifies several in one step instead of writing one per step.

The text (`expected_text`) follows the automaton at character level while it allows exactly
one character and does not accept (where it accepts, EOS is an alternative). JSON lets
optional whitespace sit between any two tokens, so a strictly forced character is rare
there; the draft writes that whitespace as the text so far lays it out (layout.py: compact
like `json.dumps`, or one member per line) and then the one non-space character the
grammar allows. That part is a guess, which verification checks like any draft; outputs
do not depend on it.

The text becomes tokens the way the model most likely writes them: the tokenizer's own
encoding of it, kept only while each token spells the next bytes of the text and the
automaton allows it (so never EOS or a special token). Tokens end inside the text, but the
last one may merge with what the model writes after it (`"` then `,` is `",`): the text is
encoded again with each likely next character (`_merge_probes`) and the last token is
dropped unless every encoding keeps it. That spelling depends only on (state, the text's
layout view), so it is cached per grammar and shared by every sequence in that state: a hit
is a dict lookup, then one per draft for the learned spellings below (~1-2 us warm); a miss
costs 0.1-0.5 ms (bench/grammar_drafts.py).

A model need not spell forced text as its tokenizer does: where the grammar forces a key the
model did not mean to write, its masked choice is often a short piece (smol-135m wrote
`"p|ri|or|ity"`; bench/grammar_accept.py). So each token a sequence writes is remembered by
the state it was written from (`learn`, bounded), and a draft passing through that state
takes it -- if it spells the forced text there -- then the tokenizer's spelling again.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, NamedTuple

from engine.grammar import charset, layout
from engine.grammar.automaton import DEAD, Matcher
from engine.grammar.layout import TextView
from engine.grammar.vocab import TokenTable

MAX_FORCED_CHARS = 96           # characters of forced text looked ahead from one state
MAX_FORCED_TOKENS = 32          # drafts cached per state (a step verifies far fewer)
MAX_CACHED_DRAFTS = 4096        # (state, text view) entries kept per grammar
MAX_LEARNED_SPELLINGS = 4096   # states whose model-written token is kept per grammar
MAX_MERGE_PROBES = 32           # characters tried after the text before assuming its last token merges
WORD_PROBES = "aA0"             # a lower-case word, a capitalised one, a number
PRINTABLE_ASCII = ((0x20, 0x7E),)
JSON_SPACE = charset.chars(" \n\t")
SENTINEL = "\n"                 # encoded before the text when the tokenizer adds a prefix space


def _single(allowed: charset.Ranges) -> str | None:
    return chr(allowed[0][0]) if len(allowed) == 1 and allowed[0][0] == allowed[0][1] else None


def _next_char(allowed: charset.Ranges, view: TextView) -> str | None:
    """The character a draft writes where `allowed` may come next; None: the model chooses.
    Where JSON's optional whitespace may come (a space and a newline at a gap's start, a
    space and a tab inside an indent: never inside a string, where newline and tab are
    escaped) the layout's whitespace is written first, unless the text already holds
    whitespace the layout would not write."""
    if not (charset.contains(allowed, 0x20) and (charset.contains(allowed, 0x0A)
                                                 or charset.contains(allowed, 0x09))):
        return _single(allowed)
    after_space = _single(charset.minus(allowed, JSON_SPACE))
    wanted = layout.plan(view, after_space)
    if len(wanted) > len(view.run) and wanted.startswith(view.run):
        return wanted[len(view.run)]
    return after_space


def expected_text(matcher: Matcher, state: int, view: TextView) -> str:
    """The text the grammar forces from `state` (optional JSON whitespace as the text's
    layout writes it), up to MAX_FORCED_CHARS; "" where the model has a choice."""
    out: list[str] = []
    while len(out) < MAX_FORCED_CHARS:
        if state == DEAD or matcher.accepts(state) or matcher.mid_character(state):
            break
        sets = matcher.char_sets(state)
        char = _next_char(charset.union(*sets), view) if sets else None
        if char is None:
            break
        data = char.encode("utf-8")
        state = matcher.step_bytes(state, data)
        out.append(char)
        view = layout.feed(view, data)
    return "".join(out) if state != DEAD else ""


def spelled_tokens(encode: Callable[[str], list[int]], table: TokenTable, text: str) -> list[int]:
    """The tokenizer's encoding of `text`, cut at the first token that does not spell its
    next bytes. A tokenizer that puts a space before a text's start (SentencePiece) encodes
    SENTINEL + text instead, and the tokens up to the text's first byte are left out."""
    data = text.encode("utf-8")
    ids = _spelled_prefix(table, encode(text), data)
    if ids or not text:
        return ids
    ids = encode(SENTINEL + text)
    pieces = [_token_bytes(table, t) or b"" for t in ids]
    boundary = sum(len(p) for p in pieces) - len(data)       # where the text starts
    offset = 0
    for k, piece in enumerate(pieces):
        if offset == boundary:
            return _spelled_prefix(table, ids[k:], data)
        offset += len(piece)
    return []                           # a token crosses into the text: no clean cut


def _token_bytes(table: TokenTable, token: int) -> bytes | None:
    return table.token_bytes[token] if 0 <= token < table.vocab_size else None


def _spelled_prefix(table: TokenTable, ids: list[int], data: bytes) -> list[int]:
    out, offset = [], 0
    for token in ids:
        piece = _token_bytes(table, token)
        if not piece or not data.startswith(piece, offset):
            break
        out.append(token)
        offset += len(piece)
    return out


class Spelling(NamedTuple):
    """The forced text from a (state, view) and its tokens as the tokenizer spells them;
    `states[k]` / `offsets[k]`: the state and the text's byte offset before tokens[k] (one
    more entry each: after the last token)."""
    tokens: tuple[int, ...]
    text: bytes
    states: tuple[int, ...]
    offsets: tuple[int, ...]


NO_SPELLING = Spelling((), b"", (), (0,))


class ForcedDrafts:
    """One grammar's forced drafts by (state, text view), LRU-cached, and the spellings its
    sequences' models wrote (engine thread)."""

    def __init__(self, matcher: Matcher, table: TokenTable, encode: Callable[[str], list[int]] | None,
                 step_token: Callable[[int, int], int]):
        self.matcher, self.table = matcher, table
        self._encode, self._step_token = encode, step_token
        self._cache: OrderedDict[tuple[int, TextView], Spelling] = OrderedDict()
        self.spellings: dict[int, int] = {}     # state -> the token a model last wrote from it
        self.built = 0                  # cache misses (the counter tests read)

    def learn(self, state: int, token: int) -> None:
        """A model wrote `token` (allowed) from `state`: later drafts there spell it so."""
        if len(self.spellings) >= MAX_LEARNED_SPELLINGS and state not in self.spellings:
            self.spellings.clear()              # bounded; the forced states come back soon
        self.spellings[state] = token

    def drafts(self, state: int, view: TextView, max_tokens: int) -> list[int]:
        """Up to `max_tokens` drafts from (state, view): the forced text as the tokenizer
        spells it, except where a model has written another token of that text from a state
        on the way: then its token, and the text's spelling again from after it."""
        out: list[int] = []
        while len(out) < max_tokens:
            spelling = self._entry(state, view)
            k = self._turn(spelling, max_tokens - len(out))
            out += spelling.tokens[:k]
            learned = self._learned(spelling, k)
            if len(out) >= max_tokens or learned is None:
                break                           # the tokenizer's drafts end here
            out.append(learned)
            state = self._step_token(spelling.states[k], learned)
            view = layout.feed(view, spelling.text[:spelling.offsets[k]] + self.table.token_bytes[learned])
        return out

    def _turn(self, spelling: Spelling, room: int) -> int:
        """How many of the tokenizer's drafts to keep: up to the first state a model left
        by another token of the text (the fast path: a dict lookup per draft)."""
        spellings, tokens = self.spellings, spelling.tokens
        for k in range(min(len(tokens), room)):
            learned = spellings.get(spelling.states[k])
            if learned is not None and learned != tokens[k] and self._learned(spelling, k) is not None:
                return k
        return min(len(tokens), room)

    def _learned(self, spelling: Spelling, k: int) -> int | None:
        """The token a model wrote from the state before tokens[k], if it spells the text there."""
        learned = self.spellings.get(spelling.states[k]) if spelling.text else None
        piece = self.table.token_bytes[learned] if learned is not None else None
        return learned if piece and spelling.text.startswith(piece, spelling.offsets[k]) else None

    def tokens(self, state: int, view: TextView) -> tuple[int, ...]:
        """The forced text from (state, view) as the tokenizer spells it."""
        return self._entry(state, view).tokens

    def _entry(self, state: int, view: TextView) -> Spelling:
        key = (state, view)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        self.built += 1
        text = expected_text(self.matcher, state, view) if self._encode is not None else ""
        entry = self._build(state, text) if text else NO_SPELLING
        self._cache[key] = entry
        if len(self._cache) > MAX_CACHED_DRAFTS:
            self._cache.popitem(last=False)
        return entry

    def _build(self, state: int, text: str) -> Spelling:
        states, drafts, offsets = [state], [], [0]      # before drafts[k]: states[k], offsets[k]
        for token in spelled_tokens(self._encode, self.table, text)[:MAX_FORCED_TOKENS]:
            nxt = self._step_token(states[-1], token)
            if nxt == DEAD:
                break
            drafts.append(token)
            states.append(nxt)
            offsets.append(offsets[-1] + len(self.table.token_bytes[token]))
        data = text.encode("utf-8")
        if offsets[-1] == len(data) and self._may_merge(text, drafts, states[-1]):
            drafts.pop()
            states.pop()
            offsets.pop()
        return Spelling(tuple(drafts), data, tuple(states), tuple(offsets))

    def _may_merge(self, text: str, drafts: list[int], end_state: int) -> bool:
        """The tokenizer would write the last draft differently once the model's next
        character follows: probe the likely ones (a letter or digit where the grammar allows
        one, else each ASCII character it allows) and compare the encodings."""
        probes = _merge_probes(charset.union(*self.matcher.char_sets(end_state)))
        if probes is None:
            return True
        return any(spelled_tokens(self._encode, self.table, text + probe)[:len(drafts)] != drafts
                   for probe in probes)


def _merge_probes(allowed: charset.Ranges) -> str | None:
    """Characters to try after the forced text, from those the grammar allows there: the
    letters and digits of WORD_PROBES when it allows some (a value mostly starts with a
    word), else every ASCII one. "" when nothing may follow; None (assume a merge) when
    there are too many to try or only non-ASCII ones."""
    words = "".join(c for c in WORD_PROBES if charset.contains(allowed, ord(c)))
    if words:
        return words
    ascii_allowed = charset.intersect(allowed, PRINTABLE_ASCII + charset.chars("\n\t"))
    count = sum(hi - lo + 1 for lo, hi in ascii_allowed)
    if count == 0 or count > MAX_MERGE_PROBES:
        return None if allowed else ""
    return "".join(chr(cp) for lo, hi in ascii_allowed for cp in range(lo, hi + 1))
