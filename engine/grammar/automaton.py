"""The character automaton with a stack, and its byte-level runner.

`compile_grammar(rules, root)` turns each named rule's expression into an NFA over
characters whose edges either read one character from a code-point set or CALL another
rule (epsilon moves removed at compile time). A run is a set of stacks of frames
`(rule, state)`: a call pushes the callee's start frame and leaves the caller's frame at
the call's return state; a rule in an accepting state may pop. That is a pushdown
automaton, so recursive JSON Schemas ($ref to an enclosing model) and nesting compile to a
finite table; `MAX_STACK_FRAMES` bounds the nesting a generation may reach. A call in tail
position (the caller's return state can only return) replaces the caller's frame instead of
pushing: the same language, but a chain of calls (an object's members, one rule per
member) costs one frame, not one per link. An intersection or difference of two call-free
expressions (a format with a pattern, a look-ahead) is built by regular.py as one DFA and
copied in as plain states, so the runner never sees it. Edges into a state that cannot reach
its rule's end are dropped (an empty intersection after some text would leave that text a
dead end), and a root rule left with no text at all is refused.

`Matcher` is the runner (one per grammar, engine thread only): it interns each distinct set
of stacks as a small int and memoises `(state, byte) -> state`. Bytes that are a proper
prefix of a UTF-8 character are held in the state until the character is complete; such a
prefix is allowed when some character edge admits a code point that starts with it.
`DEAD` (-1) is the state after a byte the grammar forbids.

Compiling is bounded: the compile's `WorkBudget` (budget.py, shared with the schema walk
that made the expressions) pays for NFA states built (`NFA_STATE_WORK` each) and
epsilon-closure visits (one each) over all rules; a grammar that needs more
(`((a{1000}){1000})`, long chains of optionals) is refused with `GrammarInvalid` before it
costs more than about a second.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.grammar.keys import KeyRule
from engine.grammar import charset, regular
from engine.grammar.budget import WorkBudget
from engine.grammar.errors import GrammarInvalid, GrammarUnsupported

DEAD = -1
MAX_STACK_FRAMES = 128          # call nesting a generation may reach (a schema level takes <= 2)
MAX_MEMO_ENTRIES = 1 << 20      # (state, byte) transitions remembered before a reset
FRAME_BITS = 24                 # a frame is rule << FRAME_BITS | state, one int
NFA_STATE_WORK = 8              # units per NFA state built (a closure visit is 1): ~4 us each under load


@dataclass(frozen=True)
class Rule:
    char_edges: tuple[tuple[tuple[charset.Ranges, int], ...], ...]   # [state] -> ((set, dst), ...)
    call_edges: tuple[tuple[tuple[int, int], ...], ...]              # [state] -> ((rule, ret), ...)
    accepting: frozenset[int]


@dataclass(frozen=True)
class Grammar:
    """A compiled grammar: rules by index, the root rule is index 0."""
    rules: tuple[Rule, ...]
    key: str                    # canonical text it was compiled from (the cache key)
    raw_bytes: bool = False     # read each byte as one character 0..255 (no UTF-8 assembly)
    keys: KeyRule | None = None  # JSON whose keys are written once per object (keys.py)


# --------------------------------------------------------------------------- compile

class _Nfa:
    def __init__(self, budget: WorkBudget):
        self.edges: list[list[tuple]] = []          # [state] -> [(label, dst)]; label None = eps
        self.budget = budget

    def new(self) -> int:
        self.budget.spend(NFA_STATE_WORK)
        self.edges.append([])
        return len(self.edges) - 1

    def build(self, e, start: int, end: int, names: dict[str, int] | None) -> None:
        kind = e[0]
        if kind == "c":
            if e[1]:
                self.edges[start].append((("c", e[1]), end))
        elif kind == "n":
            if names is None:
                raise GrammarInvalid(f"a call of rule {e[1]!r} inside an intersection (its sides must be call-free)")
            if e[1] not in names:
                raise GrammarInvalid(f"reference to an unknown rule {e[1]!r}")
            self.edges[start].append((("n", names[e[1]]), end))
        elif kind == "s":
            cur = start
            for i, item in enumerate(e[1]):
                nxt = end if i == len(e[1]) - 1 else self.new()
                self.build(item, cur, nxt, names)
                cur = nxt
            if not e[1]:
                self.edges[start].append((None, end))
        elif kind == "a":
            for item in e[1]:
                s, t = self.new(), self.new()
                self.edges[start].append((None, s))
                self.build(item, s, t, names)
                self.edges[t].append((None, end))
        elif kind == "r":
            self._repeat(e[1], e[2], e[3], start, end, names)
        elif kind in ("i", "d"):
            self._product(e, start, end)
        else:
            raise ValueError(f"unknown expression kind {kind!r}")

    def _repeat(self, item, lo: int, hi: int | None, start: int, end: int, names) -> None:
        cur = start
        for _ in range(lo):
            nxt = self.new()
            self.build(item, cur, nxt, names)
            cur = nxt
        if hi is None:                                  # cur -item-> cur, then leave
            loop_in, loop_out = self.new(), self.new()
            self.edges[cur].append((None, loop_in))
            self.build(item, loop_in, loop_out, names)
            self.edges[loop_out].append((None, loop_in))
            self.edges[loop_in].append((None, end))
            return
        for _ in range(hi - lo):                        # nested optionals: (x(x(x)?)?)?
            nxt = self.new()
            self.edges[cur].append((None, end))
            self.build(item, cur, nxt, names)
            cur = nxt
        self.edges[cur].append((None, end))

    def _product(self, e, start: int, end: int) -> None:
        """An intersection or difference: each side built call-free on its own, determinised,
        walked as pairs (regular.py), and the trimmed pair DFA copied in as plain states."""
        kind, left, right, where = e
        sides = []
        for operand in (left, right):
            sub = _Nfa(self.budget)
            s, t = sub.new(), sub.new()
            sub.build(operand, s, t, None)
            sides.append(regular.determinise(sub.edges, s, t, self.budget))
        dfa = regular.product(*sides, keep_right=kind == "i", budget=self.budget)
        if dfa.empty and where is not None:
            raise GrammarUnsupported(f"no string at {where} matches the pattern: its conditions (and the format "
                                     "beside it, if any) leave nothing to write",
                                     path=where, keyword="pattern")
        states = [self.new() for _ in dfa.edges]
        if states:
            self.edges[start].append((None, states[0]))
        for src, row in enumerate(dfa.edges):
            self.edges[states[src]].extend((("c", ranges), states[dst]) for ranges, dst in row)
            if src in dfa.accepting:
                self.edges[states[src]].append((None, end))

    def alive(self, end: int) -> set[int]:
        """The states from which `end` can be reached (a call is taken to return): an edge into
        any other state leads to a text that can never be finished, so it is left out."""
        into: list[list[int]] = [[] for _ in self.edges]
        for src, out in enumerate(self.edges):          # unpaid: each edge's state was paid when built
            for _, dst in out:
                into[dst].append(src)
        seen, todo = {end}, [end]
        while todo:
            for src in into[todo.pop()]:
                if src not in seen:
                    seen.add(src)
                    todo.append(src)
        return seen

    def closure(self, s: int) -> set[int]:
        seen, todo = {s}, [s]
        while todo:
            for label, dst in self.edges[todo.pop()]:
                if label is None and dst not in seen:
                    seen.add(dst)
                    todo.append(dst)
        return seen


def _compile_rule(e, names: dict[str, int], budget: WorkBudget) -> Rule:
    nfa = _Nfa(budget)
    start, end = nfa.new(), nfa.new()
    nfa.build(e, start, end, names)
    live = nfa.alive(end)
    index = {start: 0}
    order = [start]
    chars_out, calls_out, accepting = [], [], set()
    i = 0
    while i < len(order):                               # only live states reachable by real edges
        s = order[i]
        cl = nfa.closure(s)
        budget.spend(len(cl))
        c_edges, n_edges = [], []
        for t in sorted(cl):
            for label, dst in nfa.edges[t]:
                if label is None or dst not in live:
                    continue
                if dst not in index:
                    index[dst] = len(order)
                    order.append(dst)
                (c_edges if label[0] == "c" else n_edges).append((label[1], index[dst]))
        if end in cl:
            accepting.add(i)
        chars_out.append(tuple(dict.fromkeys(c_edges)))
        calls_out.append(tuple(dict.fromkeys(n_edges)))
        i += 1
    return Rule(tuple(chars_out), tuple(calls_out), frozenset(accepting))


def compile_grammar(rules: dict[str, tuple], root: str, key: str, *, raw_bytes: bool = False,
                    budget: WorkBudget | None = None) -> Grammar:
    """Named expressions -> a `Grammar` whose rule 0 is `root` (spending from the compile's budget)."""
    names = [root] + [n for n in rules if n != root]
    index = {n: i for i, n in enumerate(names)}
    budget = budget if budget is not None else WorkBudget()
    compiled = tuple(_compile_rule(rules[n], index, budget) for n in names)
    root_rule = compiled[0]
    if not root_rule.char_edges[0] and not root_rule.call_edges[0] and 0 not in root_rule.accepting:
        raise GrammarUnsupported("no text matches this grammar (a pattern, or a format beside it, leaves "
                                 "nothing to write)")
    return Grammar(compiled, key, raw_bytes)


# --------------------------------------------------------------------------- run

class Matcher:
    """Steps one grammar over bytes; states are ints, transitions memoised (engine thread)."""

    def __init__(self, grammar: Grammar):
        self.grammar = grammar
        self._rules = grammar.rules
        self._stacks: list[frozenset] = []              # char state id -> set of stacks
        self._char_ids: dict[frozenset, int] = {}
        self._states: list[tuple[int, bytes]] = []      # byte state id -> (char state, pending)
        self._state_ids: dict[tuple[int, bytes], int] = {}
        self._memo: dict[tuple[int, int], int] = {}
        self._tail = [frozenset(s for s in rule.accepting if not rule.char_edges[s] and not rule.call_edges[s])
                      for rule in self._rules]          # [rule] return states that can only return
        self.initial = self._byte_state(self._char_state(self._closure([(0,)])), b"")

    # -- interning
    def _char_state(self, stacks: frozenset) -> int:
        sid = self._char_ids.get(stacks)
        if sid is None:
            sid = self._char_ids[stacks] = len(self._stacks)
            self._stacks.append(stacks)
        return sid

    def _byte_state(self, char_state: int, pending: bytes) -> int:
        key = (char_state, pending)
        sid = self._state_ids.get(key)
        if sid is None:
            sid = self._state_ids[key] = len(self._states)
            self._states.append(key)
        return sid

    # -- the pushdown moves
    def _closure(self, stacks) -> frozenset:
        """All stacks reachable by calls and returns; keep those that can read or accept."""
        seen, todo, keep = set(), list(stacks), set()
        rules = self._rules
        while todo:
            st = todo.pop()
            if st in seen:
                continue
            seen.add(st)
            top = st[-1]
            rule = rules[top >> FRAME_BITS]
            state = top & ((1 << FRAME_BITS) - 1)
            if rule.char_edges[state] or (len(st) == 1 and state in rule.accepting):
                keep.add(st)
            tail = self._tail[top >> FRAME_BITS]
            for callee, ret in rule.call_edges[state]:
                if ret in tail:                         # nothing left to do here: replace the frame
                    todo.append(st[:-1] + (callee << FRAME_BITS,))
                elif len(st) < MAX_STACK_FRAMES:
                    todo.append(st[:-1] + ((top >> FRAME_BITS) << FRAME_BITS | ret, callee << FRAME_BITS))
            if state in rule.accepting and len(st) > 1:
                todo.append(st[:-1])
        return frozenset(keep)

    def _edges(self, stacks: frozenset):
        rules = self._rules
        for st in stacks:
            top = st[-1]
            rule_i = top >> FRAME_BITS
            for ranges, dst in rules[rule_i].char_edges[top & ((1 << FRAME_BITS) - 1)]:
                yield st, rule_i, ranges, dst

    def _step_char(self, char_state: int, cp: int) -> int:
        moved = [st[:-1] + (rule_i << FRAME_BITS | dst,)
                 for st, rule_i, ranges, dst in self._edges(self._stacks[char_state])
                 if charset.contains(ranges, cp)]
        return self._char_state(self._closure(moved)) if moved else DEAD

    def _admits_prefix(self, char_state: int, prefix: bytes) -> bool:
        span = charset.utf8_prefix_range(prefix)
        return span is not None and any(charset.overlaps(ranges, *span)
                                        for _, _, ranges, _ in self._edges(self._stacks[char_state]))

    # -- public
    def step(self, state: int, byte: int) -> int:
        key = (state, byte)
        out = self._memo.get(key)
        if out is None:
            out = self._step_uncached(state, byte)
            if len(self._memo) >= MAX_MEMO_ENTRIES:
                self._memo.clear()
            self._memo[key] = out
        return out

    def _step_uncached(self, state: int, byte: int) -> int:
        char_state, pending = self._states[state]
        if self.grammar.raw_bytes:
            nxt = self._step_char(char_state, byte)
            return DEAD if nxt == DEAD else self._byte_state(nxt, b"")
        data = pending + bytes((byte,))
        n = charset.utf8_length(data[0])
        if n == 0:
            return DEAD
        if len(data) < n:
            return self._byte_state(char_state, data) if self._admits_prefix(char_state, data) else DEAD
        try:
            cp = ord(data.decode("utf-8"))
        except UnicodeDecodeError:
            return DEAD
        nxt = self._step_char(char_state, cp)
        return DEAD if nxt == DEAD else self._byte_state(nxt, b"")

    def step_bytes(self, state: int, data: bytes) -> int:
        for b in data:
            state = self.step(state, b)
            if state == DEAD:
                break
        return state

    def accepts(self, state: int) -> bool:
        """The text so far is a complete sentence of the grammar (EOS may come here)."""
        if state == DEAD:
            return False
        char_state, pending = self._states[state]
        if pending:
            return False
        return any(len(st) == 1 and (st[0] & ((1 << FRAME_BITS) - 1)) in self._rules[st[0] >> FRAME_BITS].accepting
                   for st in self._stacks[char_state])

    def char_sets(self, state: int) -> tuple[charset.Ranges, ...]:
        """The character sets an edge out of this state reads (a character outside all of them is DEAD)."""
        if state == DEAD:
            return ()
        return tuple(dict.fromkeys(ranges for _, _, ranges, _ in self._edges(self._stacks[self._states[state][0]])))

    def mid_character(self, state: int) -> bool:
        """The bytes so far end inside a UTF-8 character (the state holds its first bytes)."""
        return state != DEAD and bool(self._states[state][1])

    def can_continue(self, state: int) -> bool:
        """Some character may still follow."""
        return state != DEAD and any(True for _ in self._edges(self._stacks[self._states[state][0]]))
