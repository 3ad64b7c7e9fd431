"""The engine on the project's loaded test models (tests/models.py fixtures)."""
from engine.api import EngineConfig, GenRequest, SamplingParams
from engine.core.engine import Engine
from engine.model.loader import load_model
from tests.engine.core.engine_models import GREEDY, dense_greedy, run_to_completion, tokens_of



def test_succ_fixture_hand_example(succ_model_dir):
    engine = Engine(load_model(succ_model_dir))
    rid = engine.add_request(GenRequest(prompt=(97,), params=GREEDY, max_tokens=3))
    outs = run_to_completion(engine)[rid]
    assert tokens_of(outs) == [98, 99, 100] and outs[-1].finish == "length"


def test_succ_fixture_seeded_sampling_repeats_and_varies(succ_model_dir):
    model = load_model(succ_model_dir)

    def sample(seed):
        engine = Engine(model)
        rid = engine.add_request(GenRequest(prompt=(97,), params=SamplingParams(temperature=1.0),
                                            seed=seed, max_tokens=12))
        return tokens_of(run_to_completion(engine)[rid])
    assert sample(3) == sample(3)
    assert len({tuple(sample(s)) for s in range(4)}) > 1


def test_tiny_llama_batched_paged_engine_equals_dense_generate(tiny_llama_dir):
    model = load_model(tiny_llama_dir)
    prompts = [tuple(model.tokenizer.encode(t)) for t in
               ("Hello there, general", "a", "The quick brown fox jumps over the lazy dog. " * 3)]
    engine = Engine(model, EngineConfig(block_size=8, num_kv_blocks=64, prefill_chunk=10))
    ids = [engine.add_request(GenRequest(prompt=p, params=GREEDY, max_tokens=10)) for p in prompts]
    outs = run_to_completion(engine)
    eos = model.config.eos_token_ids
    for rid, p in zip(ids, prompts):
        assert tokens_of(outs[rid]) == dense_greedy(model, p, 10, stop_ids=eos)
    assert engine.stats().kv_blocks_used == 0
