"""The speculation policy: per decoding sequence and step, which source drafts and how many tokens.

Every source that can draft for the sequence offers a draft under the length rule with its
own acceptance (what a grammar forces, the request's prediction, earlier requests' text,
the request's own context), and the draft expected to give the step the most tokens per
second wins; on a tie the surer source (`SOURCES` order). Taking the first source that
offered anything let a grammar draft (~60% accepted on the extraction task) stand in for
a suffix draft of the same JSON (~98%).

The draft-length rule. If a source's drafts are accepted position by position with
probability a (the first rejection ends them), k drafts for one of a step's B decoding
sequences add a + a^2 + ... + a^k expected tokens and k rows, so the rule picks

    k = argmax over 0..max of  (B + a + ... + a^k) / step_s(B + k)

the most expected tokens per second of step (B and the B tokens grow with the drafts the
step's earlier sequences took: `DraftBatch`). `step_s(rows)` is learned from the steps
without prompt rows (prefill steps of hundreds of rows are compute-bound and say nothing
of the few-row regime drafts live in): a table of seconds per row count
(engine/core/step_cost.py `RowCostTable`; a 1-row step is a matrix-vector product, 2+
rows a gemm that costs a jump, then little more per row) filled in between the counts
seen, outside them by an affine fit of the same steps (`StepCostModel`), and before any
step by `PRIOR_ROW_COST_RATIO`. So: many drafts at one stream (the step is bound by
reading the weights), fewer as B grows, none when a is near 0 -- replacing a fixed "no
drafts above N streams" cut. At most `SPEC_MAX_DRAFT_TOKENS` per sequence and the step's token budget.

Acceptance is measured per source over all requests (decayed, from a prior: grammar and
prediction high) and by the source's streak in the sequence: how many of its drafted
tokens in a row the model has produced since its last miss. A source's drafts are right
in runs -- an edit's answer copies the predicted file for hundreds of tokens, then leaves
it for the changed line -- so one rate per source (or per sequence) averages the runs with
the misses, and an answer copying its file for hundreds of tokens was drafted 3 or 4
tokens a step. So the trials are kept per streak bucket (0, 1, 2-3, 4-7, ... 32+), and a
draft's position i, counted from a streak s, is accepted with the rate of s + i's bucket:
the rule drafts long inside a run and short just after a miss. A bucket not measured yet
takes half the miss rate of the one below it as its prior. A trial is a verified
draft position: accepted, or the mismatch that ended the draft.

Back-off for guesses: when all of a sequence's suffix or prompt-lookup drafts miss, those
two sources pause for 1, 2, 4 ... steps (`speculative.pause_after`), so plain chat pays
for few drafts; and they draft only while at most `GUESS_MAX_DECODING` sequences decode. Nothing here changes an output: it only chooses rows to verify.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import accumulate
from operator import mul
from typing import Callable, Sequence as Positions

from engine.core.drafts import lookup
from engine.core.drafts.prediction import PredictionTrack
from engine.core.drafts.suffix import SuffixStore
from engine.core.sequence import Sequence
from engine.core.speculative import pause_after
from engine.core.step_cost import RowCostTable, StepCostModel
from engine.types import SpeculativeConfig, TokenOut

GRAMMAR, PREDICTION, SUFFIX, PROMPT_LOOKUP = "grammar", "prediction", "suffix", "prompt_lookup"
SOURCES = (GRAMMAR, PREDICTION, SUFFIX, PROMPT_LOOKUP)       # the surest first (wins a tie)
METHOD_SOURCES = {"auto": SOURCES} | {source: (source,) for source in SOURCES}   # config method -> sources
GUESSING_SOURCES = frozenset((SUFFIX, PROMPT_LOOKUP))       # paused after misses
# Guesses (suffix, prompt lookup) only while at most this many sequences decode: at 16
# streams of chat the rule's small predicted gains were a loss when measured (0.85x of
# speculation off, bench/spec_bench.py --tasks chat); grammar and prediction drafts, whose
# acceptance is high, follow the rule at any batch.
GUESS_MAX_DECODING = 8

SPEC_MAX_DRAFT_TOKENS = 32         # drafts of one sequence in one step, at most
# Acceptance per draft position assumed before any is measured, and its weight in trials.
PRIOR_ACCEPTANCE = {GRAMMAR: 0.95, PREDICTION: 0.9, SUFFIX: 0.6, PROMPT_LOOKUP: 0.5}
PRIOR_TRIALS = 8.0                 # a source's prior counts as this many trials (per streak bucket)
STREAK_BUCKETS = 7                 # streaks 0, 1, 2-3, 4-7, 8-15, 16-31, 32+ (bit length, capped)
STREAK_MISS_RATIO = 0.5            # a bucket's prior miss rate: this times the one measured below it
MAX_SOURCE_TRIALS = 2000.0         # past this a source's counts halve: recent requests count more
MAX_ACCEPTANCE = 0.99              # a rate never taken as certain
PRIOR_ROW_COST_RATIO = 0.1         # per_row_s / fixed_s until the step cost is learned
MIN_DRAFT_GAIN = 1e-3              # a draft expected to add fewer tokens than this ends the search
DECODE_MIN_ROW_SPREAD = 1.0        # decode steps' rows vary little: a slope from this spread on


def streak_bucket(streak: int) -> int:
    """Trials are kept per bucket of streak: 0, 1, 2-3, 4-7, ... (its bit length), capped."""
    return min(streak.bit_length(), STREAK_BUCKETS - 1)


def position_gains(acceptance: float | Positions[float], count: int) -> list[float]:
    """The expected tokens each of `count` drafted positions adds: the chance that it and
    every position before it are accepted (a constant rate or one per position)."""
    rates = [acceptance] * count if isinstance(acceptance, float) else list(acceptance[:count])
    return list(accumulate((min(a, MAX_ACCEPTANCE) for a in rates), mul))


def draft_length(acceptance: float | Positions[float], step_s: Callable[[int], float], rows: int,
                 max_tokens: int, expected_tokens: float | None = None) -> int:
    """The drafts (0..max_tokens) that give the most expected tokens per second of a step
    that holds `rows` rows so far, worth `expected_tokens` tokens (default: one a row);
    `acceptance` is one rate for every position or a rate per position."""
    rows = max(1, rows)
    expected_tokens = float(rows if expected_tokens is None else expected_tokens)
    best_k, best_rate = 0, expected_tokens / step_s(rows)
    for k, gain in enumerate(position_gains(acceptance, max_tokens), start=1):
        expected_tokens += gain
        rate = expected_tokens / step_s(rows + k)
        if rate > best_rate:
            best_k, best_rate = k, rate
        if gain < MIN_DRAFT_GAIN:                 # later drafts add next to nothing
            break
    return best_k


def affine_step_s(row_cost_ratio: float) -> Callable[[int], float]:
    """A step's time in units of its fixed part: 1 + rows * per_row_s / fixed_s."""
    return lambda rows: 1.0 + rows * row_cost_ratio


@dataclass(slots=True)
class DraftBatch:
    """One step's drafting so far (the scheduler makes one per step): each sequence's draft
    is chosen against the step as the sequences before it left it, so 16 streams do not
    each draft as if their rows were the only extra ones."""
    rows: int                           # decode rows, then + the drafts given so far
    expected_tokens: float = 0.0        # one per decode row + the drafts' expected tokens
    decoding: int = -1                  # the step's decoding sequences (default: `rows`)

    def __post_init__(self) -> None:
        self.expected_tokens = self.expected_tokens or float(self.rows)
        self.decoding = self.rows if self.decoding < 0 else self.decoding

    def take(self, draft: "Draft") -> None:
        self.rows += len(draft.tokens)
        self.expected_tokens += draft.expected_tokens

    def give_back(self, draft: "Draft") -> None:
        """A draft the step could not hold (no KV room for it) no longer counts."""
        self.rows -= len(draft.tokens)
        self.expected_tokens -= draft.expected_tokens


@dataclass(frozen=True, slots=True)
class Draft:
    source: str
    tokens: tuple[int, ...]
    expected_tokens: float = 0.0        # of the drafted ones, by the source's acceptance


@dataclass(slots=True)
class Trials:
    """Verified draft positions: accepted ones out of all (weights, so they can decay)."""
    accepted: float = 0.0
    trials: float = 0.0

    def rate(self, prior: float, prior_trials: float) -> float:
        return (self.accepted + prior * prior_trials) / (self.trials + prior_trials)

    def add(self, accepted: int, trials: int, max_trials: float | None = None) -> None:
        self.accepted += accepted
        self.trials += trials
        if max_trials is not None and self.trials > max_trials:
            self.accepted, self.trials = self.accepted / 2, self.trials / 2


@dataclass(slots=True)
class SeqDrafts:
    """A sequence's speculation state (on `Sequence.drafts`)."""
    track: PredictionTrack | None
    streaks: dict[str, int] = field(default_factory=dict)    # source -> drafts produced since its miss
    prediction_accepted: int = 0        # drafted prediction tokens the model produced
    prediction_rejected: int = 0        # ... and the others


@dataclass(slots=True)
class SourceCount:
    drafted: int = 0
    accepted: int = 0


class DraftPolicy:
    """Chooses drafts (`propose`, the scheduler's drafter) and learns from them (`settle`)."""

    def __init__(self, config: SpeculativeConfig, max_model_len: int, *,
                 step_cost: StepCostModel | None = None, store: SuffixStore | None = None):
        self.config = config
        self.sources = METHOD_SOURCES[config.method]
        self.step_cost = step_cost or StepCostModel(min_row_spread=DECODE_MIN_ROW_SPREAD)
        self.row_costs = RowCostTable()
        self._curve: tuple[int, list[float] | None] = (-1, None)    # (table observations, curve)
        self.max_model_len = max_model_len
        self.store = store if store is not None or SUFFIX not in self.sources else SuffixStore()
        self.trials = {source: [Trials() for _ in range(STREAK_BUCKETS)] for source in self.sources}
        self.counts = {source: SourceCount() for source in self.sources}

    # -- choosing ---------------------------------------------------------------------------

    def propose(self, seq: Sequence, budget_tokens: int, batch: DraftBatch) -> Draft | None:
        """The draft for `seq` this step (None: none), within `budget_tokens` rows; `batch`
        is the step so far and takes the draft's rows and expected tokens."""
        state = self._state(seq)
        room = min(budget_tokens, SPEC_MAX_DRAFT_TOKENS, seq.req.max_tokens - seq.num_generated - 1,
                   self.max_model_len - len(seq.tokens) - 1)
        paused = seq.draft_pause_steps > 0
        if paused:
            seq.draft_pause_steps -= 1
        if room <= 0:
            return None
        if state.track is not None:
            state.track.follow(seq.tokens[seq.num_prompt:])
        step_s = self.step_seconds()
        best: tuple[float, Draft] | None = None             # (tokens per second of step, draft)
        for source in self.sources:
            guessing_off = paused or batch.decoding > GUESS_MAX_DECODING
            if (guessing_off and source in GUESSING_SOURCES) or (source == GRAMMAR and seq.constraint is None) \
                    or (source == PREDICTION and state.track is None):
                continue                          # nothing to draft from: skip the rule's work
            rates = self.acceptances(seq, source, room)
            k = draft_length(rates, step_s, batch.rows, room, batch.expected_tokens)
            tokens = self._offer(source, seq, state, k) if k > 0 else []
            if tokens:
                draft = Draft(source, tuple(tokens), sum(position_gains(rates, len(tokens))))
                rate = (batch.expected_tokens + draft.expected_tokens) / step_s(batch.rows + len(tokens))
                if best is None or rate > best[0]:
                    best = (rate, draft)
        if best is None:
            return None
        batch.take(best[1])
        return best[1]

    def observe_step(self, num_rows: int, step_s: float) -> None:
        """A step without prompt rows: `num_rows` decode and draft rows took `step_s`."""
        self.step_cost.observe(num_rows, step_s)
        self.row_costs.observe(num_rows, step_s)

    def step_seconds(self) -> Callable[[int], float]:
        """rows -> a decode step's time, as learned (relative units before any step)."""
        ratio = self.row_cost_ratio()
        seen, curve = self._curve
        if seen != self.row_costs.observations:
            curve = self.row_costs.curve(ratio)
            self._curve = (self.row_costs.observations, curve)
        if curve is None:
            return affine_step_s(ratio)
        last = len(curve) - 1

        def step_s(rows: int) -> float:
            if rows <= last:
                return curve[rows]
            return curve[last] * (1.0 + rows * ratio) / (1.0 + last * ratio)
        return step_s

    def row_cost_ratio(self) -> float:
        """per_row_s / fixed_s of a step, as learned (the prior until then)."""
        fitted = self.step_cost.fit()
        if fitted is None:
            return PRIOR_ROW_COST_RATIO
        fixed_s, per_row_s = fitted
        return per_row_s / fixed_s if fixed_s > 0 else float("inf")

    def acceptances(self, seq: Sequence, source: str, count: int) -> list[float]:
        """The acceptance of `source`'s next `count` drafted positions for `seq`: position i
        at the rate measured for streak s + i, s the source's streak in `seq`."""
        streak = self._state(seq).streaks.get(source, 0)
        by_bucket = self.bucket_rates(source)
        return [by_bucket[streak_bucket(streak + i)] for i in range(count)]

    def bucket_rates(self, source: str) -> list[float]:
        """`source`'s acceptance per streak bucket. Bucket 0's prior is the source's; each
        longer streak's prior halves the miss rate measured one bucket down (as measured on
        the edit task: prompt lookup 0.55, 0.65, 0.81, 0.87, 0.95, 1.0 from streak 0 up), so
        a streak no request has reached yet is trusted as the trend says, not reset."""
        rates, prior = [], PRIOR_ACCEPTANCE[source]
        for trials in self.trials[source]:
            rates.append(trials.rate(prior, PRIOR_TRIALS))
            prior = 1.0 - (1.0 - rates[-1]) * STREAK_MISS_RATIO
        return rates

    def _offer(self, source: str, seq: Sequence, state: SeqDrafts, k: int) -> list[int]:
        if source == GRAMMAR:
            return seq.constraint.forced_drafts(k) if seq.constraint is not None else []
        if source == PREDICTION:
            return state.track.propose(seq.tokens, k) if state.track is not None else []
        if source == SUFFIX:
            return self.store.propose(seq.tokens, k, seq.req.scope)
        return lookup.propose(seq.tokens, self.config, k)

    @staticmethod
    def _state(seq: Sequence) -> SeqDrafts:
        if seq.drafts is None:
            track = PredictionTrack(seq.req.prediction) if seq.req.prediction else None
            seq.drafts = SeqDrafts(track)
        return seq.drafts

    # -- learning ---------------------------------------------------------------------------

    def settle(self, seq: Sequence, draft: Draft, accepted: int, mismatched: bool) -> None:
        """After verification: `accepted` leading drafts were produced; `mismatched`: the
        next one was not (False when the request finished first, or every draft held)."""
        state, buckets = self._state(seq), self.trials[draft.source]
        streak = state.streaks.get(draft.source, 0)
        for i in range(accepted + int(mismatched)):          # position i was tried at streak + i
            buckets[streak_bucket(streak + i)].add(int(i < accepted), 1, MAX_SOURCE_TRIALS)
        state.streaks[draft.source] = 0 if mismatched else streak + accepted
        count = self.counts[draft.source]
        count.drafted += len(draft.tokens)
        count.accepted += accepted
        if draft.source == PREDICTION:
            state.prediction_accepted += accepted
            state.prediction_rejected += len(draft.tokens) - accepted
        if draft.source in GUESSING_SOURCES:
            seq.draft_misses = 0 if accepted else seq.draft_misses + 1
            seq.draft_pause_steps = pause_after(seq.draft_misses)

    def finish(self, seq: Sequence) -> None:
        """A request ended: its text joins the suffix store."""
        if self.store is not None and seq.num_generated > 0:
            self.store.add(seq.tokens, seq.req.scope)

    def by_source(self) -> tuple[tuple[str, int, int], ...]:
        """(source, drafted tokens, accepted tokens) per enabled source, since start."""
        return tuple((s, self.counts[s].drafted, self.counts[s].accepted) for s in self.sources)


def prediction_counts(seq: Sequence) -> tuple[int, int]:
    """(accepted, rejected) drafted prediction tokens of a request so far."""
    state = seq.drafts
    return (0, 0) if state is None else (state.prediction_accepted, state.prediction_rejected)


def with_prediction_counts(seq: Sequence, out: TokenOut) -> TokenOut:
    """`out` with the request's prediction counts so far (unchanged without any). The step's
    last TokenOut of a request with a prediction, and every finishing one, carry them: a
    server that ends the request itself (a stop string) has them without the engine's finish."""
    accepted, rejected = prediction_counts(seq)
    if not (accepted or rejected):
        return out
    return replace(out, accepted_prediction_tokens=accepted, rejected_prediction_tokens=rejected)
