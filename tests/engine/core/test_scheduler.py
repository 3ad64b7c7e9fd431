"""Scheduling policy: priority order, the bounded queue, deadlines, budgets, preemption."""

from engine.api import FINISH_DEADLINE, EngineConfig, GenRequest
from engine.core.engine import Engine
from tests.engine.core.engine_models import (GREEDY, dense_greedy, random_model, run_to_completion,
                                        succ_model, tokens_of)



def req(prompt, max_tokens=1, **kw):
    return GenRequest(prompt=tuple(prompt), params=GREEDY, max_tokens=max_tokens, **kw)


def finish_order(engine):
    order = []
    while engine.has_work():
        order += [o.id for o in engine.step() if o.finish]
    return order


def test_higher_priority_runs_first_and_fcfs_within_a_priority():
    engine = Engine(succ_model(), EngineConfig(max_num_seqs=1))
    ids = [engine.add_request(req([97], priority=p)) for p in (0, 5, 5, -1, 0)]
    assert finish_order(engine) == [ids[1], ids[2], ids[0], ids[4], ids[3]]


def test_request_waiting_past_its_deadline_fails_with_deadline():
    now = [0.0]
    engine = Engine(succ_model(), EngineConfig(max_num_seqs=1), clock=lambda: now[0])
    running = engine.add_request(req([97], max_tokens=3, deadline_s=1.0))
    late = engine.add_request(req([98], deadline_s=1.0))
    engine.step()                                   # running is scheduled in time
    now[0] = 2.0
    outs = engine.step()
    assert [(o.id, o.token, o.finish) for o in outs if o.id == late] == [(late, None, FINISH_DEADLINE)]
    rest = run_to_completion(engine)
    assert late not in rest and tokens_of(rest[running]) == [100]


def test_decodes_keep_flowing_while_a_long_prompt_prefills_in_chunks():
    engine = Engine(random_model(), EngineConfig(block_size=4, num_kv_blocks=64,
                                                 max_batched_tokens=6, prefill_chunk=4))
    short = engine.add_request(req([1, 2], max_tokens=12))
    engine.step()
    engine.add_request(req(range(1, 40), max_tokens=1))
    for _ in range(8):                              # 39 prompt tokens need >= 8 steps at <= 5 per step
        outs = engine.step()
        assert [o.id for o in outs].count(short) == 1
        assert engine.stats().batch_tokens <= 6


def test_out_of_blocks_preempts_the_latest_arrival_of_the_lowest_priority():
    model = random_model()
    a_prompt, b_prompt = (3, 1, 4, 1, 5, 9), (2, 7, 1, 8, 2, 8)
    for b_priority, victim in ((0, "b"), (1, "a")):
        engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=4, prefix_cache="none"))
        a = engine.add_request(req(a_prompt, max_tokens=8))
        b = engine.add_request(req(b_prompt, max_tokens=8, priority=b_priority))
        outs = run_to_completion(engine)
        assert engine.stats().preemptions_total >= 1
        assert tokens_of(outs[a]) == dense_greedy(model, a_prompt, 8)
        assert tokens_of(outs[b]) == dense_greedy(model, b_prompt, 8)
        engine = Engine(model, EngineConfig(block_size=4, num_kv_blocks=4, prefix_cache="none"))
        a = engine.add_request(req(a_prompt, max_tokens=8))
        b = engine.add_request(req(b_prompt, max_tokens=8, priority=b_priority))
        first_done = finish_order(engine)[0]
        assert first_done == (a if victim == "b" else b)


def test_a_sequence_that_outgrows_the_whole_pool_ends_with_length():
    engine = Engine(random_model(), EngineConfig(block_size=4, num_kv_blocks=2))
    rid = engine.add_request(req([1, 2, 3], max_tokens=20))
    outs = run_to_completion(engine)[rid]
    # 8 positions: 3 prompt + 5 decoded tokens computed -> 6 sampled, then no block is left
    assert [o.token is None for o in outs] == [False] * 6 + [True]
    assert outs[-1].finish == "length"
    assert engine.stats().kv_blocks_used == 0


def test_a_draft_the_kv_pool_cannot_hold_stops_counting_in_the_steps_batch():
    """The draft-length rule sizes each sequence's draft by the rows the step already holds;
    a draft dropped for want of blocks must not keep counting there."""
    from engine.core.drafts.policy import Draft
    engine = Engine(random_model(), EngineConfig(block_size=4, num_kv_blocks=3, prefix_cache="none"))
    first = engine.add_request(req([5, 6, 7], max_tokens=20))
    engine.add_request(req([8, 9, 10], max_tokens=20))
    engine.step()                                   # both prompts computed: each decodes next
    seen = []

    def drafter(seq, budget, batch):
        seen.append((seq.id, batch.rows, batch.expected_tokens))
        if seq.id != first:
            return None
        draft = Draft("prediction", tuple(range(11, 23)), expected_tokens=9.0)   # 12 rows: no room
        batch.rows += len(draft.tokens)             # as the policy does: the draft takes its rows
        batch.expected_tokens += draft.expected_tokens
        return draft

    class OnlyPropose:                              # the speculation policy, as far as this step uses it
        propose = staticmethod(drafter)

    engine.scheduler.drafts = OnlyPropose()
    engine.step()
    assert [s[0] for s in seen] == [first, seen[1][0]] and seen[1][0] != first
    assert seen[1][1:] == (2, 2.0)                  # the two decode rows, not 2 + 12 drafted
