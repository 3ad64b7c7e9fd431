"""Everything at once against the dense reference: staggered arrivals, shared prefixes,
chunking, speculation, a pool small enough to force preemption and eviction, aborts."""
import numpy as np
import pytest

from engine.api import EngineConfig, GenRequest, SpeculativeConfig
from engine.core.engine import Engine
from tests.engine.core.engine_models import GREEDY, dense_greedy, random_model

SPEC = SpeculativeConfig(num_speculative_tokens=3, prompt_lookup_min=1, prompt_lookup_max=2)
CONFIGS = {
    "tiny-pool": EngineConfig(block_size=4, num_kv_blocks=14, max_num_seqs=4, prefill_chunk=5,
                              max_batched_tokens=12),
    "tiny-pool-spec": EngineConfig(block_size=4, num_kv_blocks=11, max_num_seqs=5, prefill_chunk=7,
                                   max_batched_tokens=16, speculative=SPEC),
    "roomy-no-cache": EngineConfig(block_size=8, num_kv_blocks=200, prefix_cache="none", prefill_chunk=6),
    "roomy-spec": EngineConfig(block_size=2, num_kv_blocks=400, speculative=SPEC, max_num_seqs=3),
    "tight-latency": EngineConfig(block_size=4, num_kv_blocks=60, prefill_chunk=6,
                                  max_batched_tokens=16, tokens_beside_decode=2),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_mixed_workload_matches_dense_and_leaks_nothing(name):
    model = random_model(seed=21)
    rng = np.random.default_rng(len(name))
    shared = [tuple(int(t) for t in rng.integers(0, 64, n)) for n in (9, 13)]
    engine = Engine(model, CONFIGS[name])
    expected, got, aborted = {}, {}, set()
    for step in range(400):
        if step < 24 and step % 2 == 0:
            prefix = shared[int(rng.integers(0, 2))] if rng.random() < 0.6 else ()
            prompt = prefix + tuple(int(t) for t in rng.integers(0, 64, int(rng.integers(1, 9))))
            max_tokens = int(rng.integers(1, 14))
            rid = engine.add_request(GenRequest(prompt=prompt, params=GREEDY, max_tokens=max_tokens,
                                                priority=int(rng.integers(0, 2))))
            expected[rid] = dense_greedy(model, prompt, max_tokens)
        if step == 9:
            victim = next(iter(expected))
            engine.abort(victim)
            aborted.add(victim)
        for out in engine.step():
            got.setdefault(out.id, []).append(out.token)
        if step > 24 and not engine.has_work():
            break
    for rid, want in expected.items():
        if rid not in aborted:
            assert got[rid] == want, rid
    stats = engine.stats()
    assert stats.kv_blocks_used == 0 and stats.active_sequences == 0 and not engine.has_work()
    if name.startswith("tiny-pool"):
        assert stats.preemptions_total > 0
