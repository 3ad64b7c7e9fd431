"""Draft sources and the one speculation policy that chooses among them.

A draft is a guess of the tokens a decoding sequence will produce next; the engine appends
it to the sequence's row of a step and keeps the guessed tokens the model itself samples
(engine/core/engine.py verifies them in order with the request's own seeded stream), so
outputs are identical to plain decoding whatever the guess. Each source answers
`(seq, max_tokens) -> list[int]`:

    grammar        lookup of what the request's grammar forces next (engine/grammar/)
    prediction     the request's predicted output, followed by a cursor (prediction.py)
    suffix         continuations of earlier prompts and outputs (suffix.py)
    prompt_lookup  the request's own context, n-gram matched (lookup.py)

`policy.py` decides, per decoding sequence and step, which source drafts and how many
tokens: the draft-length rule weighs each source's measured acceptance against the
learned cost of a step's rows (engine/core/step_cost.py).
"""
