"""Grammar drafts on the real model: every draft beside what the model wrote, its rejections sorted.

The grammar draft source (engine/grammar/forced.py) drafts the text a JSON schema forces;
verification keeps the drafts the model would have written anyway. This drives the engine
itself (no HTTP) on bench/spec_tasks.py's extraction task -- the four support e-mails, the
SupportTicket schema as the server compiles `response_format` json_schema, the prompt as
the server renders it (server/text/served.py), greedy -- with speculation's grammar source
alone, and records each grammar draft: its tokens, how many the model accepted, and at a
rejection the token the model wrote instead.

A rejection falls in one of these classes (`classify`):
  whitespace    the draft and the model part at JSON's optional whitespace (a newline or
                spaces the layout guessed, or none where the model wrote some)
  spelling      the model wrote the same text in other tokens (its token is a prefix of the
                draft's text, or the draft's token a prefix of the model's: merges)
  choice        the model wrote other text where the draft's text was not actually forced
                (both tokens allowed by the grammar, neither spells the other's text)

Usage:   python bench/grammar_accept.py            # a summary and the rejections
         python bench/grammar_accept.py --all      # every draft
         python bench/grammar_accept.py --save out.json   # + the prompts' and outputs' ids
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.spec_tasks import EMAILS, EXTRACT_MAX_TOKENS, EXTRACT_SYSTEM, ticket_schema  # noqa: E402
from engine.api import (Engine, EngineConfig, GenRequest, SamplingParams, SpeculativeConfig,  # noqa: E402
                        load_model, schema_spec)
from server.text.messages import Message                                # noqa: E402
from server.text.served import ServedModel                              # noqa: E402

MODEL = ROOT / "artifacts" / "models" / "smol-135m"
SPACE = b" \n\t"


@dataclass(frozen=True)
class DraftRecord:
    email: int
    drafts: tuple[int, ...]
    accepted: int
    written: int | None          # the model's token at the first rejected draft (None: all held)


def classify(piece, record: DraftRecord) -> str:
    """The rejection's class (see the module's docstring); `piece(id)` -> the token's bytes."""
    drafted, written = piece(record.drafts[record.accepted]), piece(record.written)
    if _leading_space(drafted) != _leading_space(written):
        return "whitespace"
    text = b"".join(piece(t) for t in record.drafts[record.accepted:])
    if text.startswith(written) or written.startswith(drafted):
        return "spelling"
    return "choice"


def _leading_space(data: bytes) -> bytes:
    return data[:len(data) - len(data.lstrip(SPACE))]


def run(model, grammar, prompts: list[list[int]]) -> tuple[list[DraftRecord], list[list[int]]]:
    """Each prompt alone through a grammar-drafting engine -> the drafts and the outputs."""
    engine = Engine(model, EngineConfig(max_num_seqs=4, speculative=SpeculativeConfig(method="grammar")))
    records: list[DraftRecord] = []
    outputs: list[list[int]] = []
    settle = engine.drafts.settle
    for index, prompt in enumerate(prompts):
        def logged(seq, draft, accepted, mismatched, index=index):
            written = seq.tokens[-1] if mismatched else None
            records.append(DraftRecord(index, draft.tokens, accepted, written))
            settle(seq, draft, accepted, mismatched)
        engine.drafts.settle = logged
        engine.add_request(GenRequest(prompt=tuple(prompt), params=SamplingParams(temperature=0.0),
                                      max_tokens=EXTRACT_MAX_TOKENS, grammar=grammar))
        out: list[int] = []
        while engine.has_work():
            out += [o.token for o in engine.step() if getattr(o, "token", None) is not None]
        outputs.append(out)
    return records, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="print every draft, not only rejections")
    parser.add_argument("--save", type=Path, help="write the outputs' token ids here (JSON)")
    args = parser.parse_args()
    model = load_model(str(MODEL))
    served = ServedModel(model, "smol-135m", 8192)
    grammar = served.grammars.get(schema_spec(ticket_schema()))
    prompts = [served.encode(served.render((Message("system", EXTRACT_SYSTEM), Message("user", email))))
               for email in EMAILS]
    records, outputs = run(model, grammar, prompts)
    tok = model.tokenizer
    piece = tok.token_bytes
    classes: Counter[str] = Counter()
    for record in records:
        shown = "|".join(piece(t).decode("utf-8", "replace") for t in record.drafts)
        if record.written is not None:
            kind = classify(piece, record)
            classes[kind] += 1
            wrote = piece(record.written).decode("utf-8", "replace")
            print(f"e{record.email} {kind:10s} acc {record.accepted}/{len(record.drafts)} "
                  f"draft {shown!r} model {wrote!r}")
        elif args.all:
            print(f"e{record.email} {'held':10s} acc {record.accepted}/{len(record.drafts)} draft {shown!r}")
    drafted = sum(len(r.drafts) for r in records)
    accepted = sum(r.accepted for r in records)
    produced = sum(len(o) for o in outputs)
    print(f"grammar drafts: {len(records)} drafts, {drafted} tokens drafted, {accepted} accepted "
          f"({accepted / max(drafted, 1):.1%}); output {produced} tokens; rejections {dict(classes)}")
    if args.save:
        args.save.write_text(json.dumps({"prompts": prompts, "outputs": outputs}))
    for i, out in enumerate(outputs):
        print(f"e{i}: {tok.decode(out)!r}")


if __name__ == "__main__":
    main()
