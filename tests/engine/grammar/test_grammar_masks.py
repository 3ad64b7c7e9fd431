"""Token masks built with numpy over the vocabulary trie (engine/grammar/trie.py, dense.py)
and shared by every sequence of a grammar (constraint.py): the same masks as the per-token
reference walk (`vocab.allowed_tokens`), one build per state whatever the number of rows."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from engine.grammar import dense
from engine.grammar.automaton import DEAD
from engine.grammar.compile import GrammarCache, GrammarSpec, schema_spec
from engine.grammar.constraint import Constraint, GrammarRuntime
from engine.grammar.trie import build_trie
from engine.grammar.vocab import allowed_tokens, build_table
from tests.engine.grammar.schemas import random_schema

ALPHABET = list('{}[]":, \n\\-.tfnul0123456789abcxyzAZ') + ["é", "✓", "😀"]


def synthetic_vocab(seed: int = 7) -> tuple[list[bytes | None], int]:
    """Every byte, ~2,000 random JSON-ish strings (multi-byte characters whole and split),
    duplicates, holes (None), an empty token, and EOS last -> (token bytes by id, eos id)."""
    rng = random.Random(seed)
    vocab: list[bytes | None] = [bytes([b]) for b in range(256)]
    for _ in range(2000):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(2, 9))).encode("utf-8")
        cut = rng.randint(1, len(text)) if rng.random() < 0.15 else len(text)    # a split character
        vocab.append(text[:cut])
    vocab += [vocab[300], vocab[301], None, b"", None]
    vocab.append(b"<eos>")
    return vocab, len(vocab) - 1


@pytest.fixture(scope="module")
def table():
    vocab, eos = synthetic_vocab()
    return build_table(vocab, special_ids=set(), eos_ids={eos})


def grammars():
    rng = random.Random(11)
    specs = [schema_spec(random_schema(rng)) for _ in range(10)]
    specs += [GrammarSpec("json_object"), GrammarSpec("regex", r"(cat|dog)s?\d{1,2}"),
              GrammarSpec("choice", json.dumps(["yes", "no", "✓"])), GrammarSpec("text")]
    return [GrammarCache().get(s) for s in specs]


def random_states(runtime: GrammarRuntime, table, rng: random.Random, steps: int):
    """States along a random walk of allowed tokens from the start (the reference decides)."""
    m = runtime.matcher
    state = m.initial
    for _ in range(steps):
        yield state
        allowed = [t for t in np.flatnonzero(allowed_tokens(table, m, state)) if t not in table.eos_ids]
        if not allowed:
            return
        state = runtime.step_token(state, rng.choice(allowed))


def test_trie_holds_every_token_and_every_prefix_once(table):
    trie = table.trie
    nodes = {b[:d] for b in table.sorted_bytes for d in range(1, len(b) + 1)}
    assert sum(len(p) for p in trie.parent[1:]) == len(nodes)
    for d in range(1, trie.depth + 1):                       # each end node spells its token
        for node, entry in zip(trie.end_node[d].tolist(), trie.end_entry[d].tolist()):
            spelled = []
            for level in range(d, 0, -1):
                spelled.append(int(trie.byte[level][node]))
                node = int(trie.parent[level][node])
            assert bytes(reversed(spelled)) == table.sorted_bytes[entry]
    assert build_trie((), np.zeros(0, dtype=np.int32)).depth == 0


def test_shared_mask_equals_a_fresh_reference_build_from_random_states(table):
    rng = random.Random(3)
    checked = 0
    for grammar in grammars():
        runtime = GrammarRuntime(grammar, table)
        for state in random_states(runtime, table, rng, steps=12):
            want = allowed_tokens(table, runtime.matcher, state)           # the per-token walk
            assert np.array_equal(runtime.mask(state), want)
            assert np.array_equal(runtime.mask(state), want)               # and from the cache
            checked += 1
    assert checked > 60


def test_sequences_in_the_same_state_share_one_build(table):
    runtime = GrammarRuntime(GrammarCache().get(schema_spec({"type": "object", "properties": {
        "name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}}})), table)
    rows = [Constraint(runtime) for _ in range(8)]
    masks = [row.mask() for row in rows]
    assert runtime.masks_built == 1 and all(m is masks[0] for m in masks)
    token = table.sorted_bytes.index(b"{")
    for row in rows[:5]:
        row.advance(int(table.sorted_ids[token]))
    assert [row.state for row in rows[:5]] == [rows[0].state] * 5
    inside = [row.mask() for row in rows[:5]]
    assert runtime.masks_built == 2 and all(m is inside[0] for m in inside)
    assert not np.array_equal(inside[0], masks[0])
    rows[5].mask()
    assert runtime.masks_built == 2                               # the start state is still cached


def test_a_state_that_can_only_end_needs_no_walk(table):
    runtime = GrammarRuntime(GrammarCache().get(schema_spec({"type": "object"})), table)
    done = runtime.matcher.step_bytes(runtime.matcher.initial, b"{}")
    before = runtime.masks_built
    mask = runtime.mask(done)
    assert np.flatnonzero(mask).tolist() == sorted(table.eos_ids)
    assert np.array_equal(mask, allowed_tokens(table, runtime.matcher, done))
    assert runtime.masks_built == before


def test_too_many_states_for_the_dense_table_falls_back_to_the_reference(table, monkeypatch):
    monkeypatch.setattr(dense, "MAX_DENSE_STATES", 2)
    runtime = GrammarRuntime(GrammarCache().get(schema_spec({"type": "array", "items": {"type": "integer"}})), table)
    state = runtime.matcher.step_bytes(runtime.matcher.initial, b"[1")
    assert state != DEAD
    assert dense.trie_mask(table.trie, runtime.dense, state, len(table.sorted_bytes)) is None
    assert np.array_equal(runtime.mask(state), allowed_tokens(table, runtime.matcher, state))
