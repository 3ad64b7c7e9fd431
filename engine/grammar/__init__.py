"""The grammar room: constrained decoding for structured outputs (JSON Schema, regex, tool calls).

A schema or a regex compiles once to a `Grammar` (`json_schema.py` with `numbers.py` and
`strings.py`, `regex_subset.py` -> `expr.py`'s expressions -> `automaton.py`'s recursive
character automaton; an intersection of two expressions is one DFA from `regular.py`),
every stage paying from one `budget.py` WorkBudget. At run time a `Matcher`
(`automaton.py`) steps the automaton over bytes (UTF-8 assembled into characters, a stack
of rule frames for nesting), `vocab.py` holds the vocabulary's token bytes in sorted
order and `trie.py` the same as a trie by depth, which `dense.py` walks with numpy to find
every token the automaton accepts (the mask; `vocab.allowed_tokens` is the per-token
reference), `constraint.py` caches masks per state for all of a grammar's sequences and is the
per-sequence cursor the sampler consults: check the sampled token first, build the mask
only when it is rejected; `forced.py` drafts the text the grammar forces next (keys, enum
tails, closing brackets) as the model's tokens for speculation, its optional whitespace as
`layout.py` learns it from the text so far. The server reaches all of
this through `engine/api.py`.
"""
