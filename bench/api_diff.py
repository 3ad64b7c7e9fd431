"""Did a refactor change what the API answers? Send one fixed request set to a server of
each of two checkouts and diff the answers.

For `--before DIR` and then `--after DIR` (one after the other, never both at once): a
fresh `tlserve.py --config runtime.toml` of that checkout (its own code and cwd: bench/
child_server.py), on its default model with its default speculation, the access log off;
then the requests of bench/api_requests.py, one at a time, each on a new connection.
Each answer becomes a document: its status, its headers (all but Content-Length), and its
body: a JSON document parsed, an SSE stream split into events (each event's name and its
data parsed; n choices' chunks one choice after the other), any other body as text.
`mask` then replaces what differs from run to run (ids, clocks) by placeholders, and the
two documents of each request are compared, leaf by leaf and key order too; two floats
within FLOAT_TOLERANCE count as equal (see there).

Prints each difference (request, path in the document, before, after) and their count;
exit code 1 when any differ. `--quick`: the smoke subset; `--out FILE`: the report as
JSON. The same checkout twice must give 0 differences: a difference there is something
nondeterministic that `mask` misses.

    python bench/api_diff.py --before ../before --after .
    python bench/api_diff.py --before ../before --after . --quick --out /tmp/api_diff.json
"""
from __future__ import annotations

import argparse
import http.client
import json
import math
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.api_requests import ApiRequest, request_set          # noqa: E402
from bench.child_server import Server                           # noqa: E402

REQUEST_TIMEOUT_S = 300.0
SSE_TYPE = "text/event-stream"
# Headers that differ with nothing the client can see: the body is compared parsed.
UNCOMPARED_HEADERS = frozenset({"content-length", "date"})
# A minted id: letters, "-" or "_", 24 hex digits ("chatcmpl-...", "req-...", "resp_...",
# "msg_...", "fc_...", "call_..."), anywhere in a string. The prefix is kept, so an id that
# changes kind still shows.
MINTED_ID = re.compile(r"\b([A-Za-z]+[-_])[0-9a-f]{24}\b")
ID_PLACEHOLDER = r"\1<id>"
# Wall-clock fields (Unix seconds): a number there becomes TIME_PLACEHOLDER (a null stays).
CLOCK_KEYS = frozenset({"created", "created_at", "completed_at"})
CLOCK_SUFFIXES = ("_ms",)        # a duration in milliseconds ("ttft_ms"), wherever it appears
TIME_PLACEHOLDER = "<time>"
ABSENT = "<absent>"              # a key or list item that only one side has
# Two floats this close are the same answer: a draft's verification step has as many rows
# as the draft-length rule picks from the step times it has measured (the clock), and
# float32 sums over another row count round differently (logprobs moved by up to ~1e-5
# between two runs of one checkout). A changed computation moves them by far more.
FLOAT_TOLERANCE = 1e-4          # relative and absolute


def mask(value):
    """`value` (a parsed JSON document) with what changes from run to run replaced:
    minted ids inside any string, and the numbers under clock keys. Returns a new value."""
    if isinstance(value, str):
        return MINTED_ID.sub(ID_PLACEHOLDER, value)
    if isinstance(value, list):
        return [mask(item) for item in value]
    if isinstance(value, dict):
        return {key: TIME_PLACEHOLDER if _is_clock(key, item) else mask(item)
                for key, item in value.items()}
    return value


def _is_clock(key: str, value) -> bool:
    timed = key in CLOCK_KEYS or key.endswith(CLOCK_SUFFIXES)
    return timed and isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Difference:
    request: str
    path: str                    # where in the document: "body.choices[0].message.content"
    before: object
    after: object
    within_tolerance: bool = False   # two floats within FLOAT_TOLERANCE: not counted


def differences(request: str, before, after, path: str = "") -> list[Difference]:
    """Every leaf where two documents differ (a missing key or item shows as ABSENT; 1 and
    1.0 differ), and every object whose keys come in another order."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        if list(before) != list(after) and set(before) == set(after):    # the wire's order
            out.append(Difference(request, f"{path}<key order>", list(before), list(after)))
        for key in list(before) + [k for k in after if k not in before]:
            out += differences(request, before.get(key, ABSENT), after.get(key, ABSENT),
                               f"{path}.{key}" if path else key)
        return out
    if isinstance(before, list) and isinstance(after, list):
        out = []
        for i in range(max(len(before), len(after))):
            out += differences(request, before[i] if i < len(before) else ABSENT,
                               after[i] if i < len(after) else ABSENT, f"{path}[{i}]")
        return out
    if type(before) is type(after) and before == after:
        return []
    near = (type(before) is float and type(after) is float
            and math.isclose(before, after, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE))
    return [Difference(request, path, before, after, within_tolerance=near)]


def sse_events(text: str) -> list[dict]:
    """An SSE body -> its events, each {"event": name or None, "data": parsed or raw}.
    Comment lines (": ping", sent after a quiet spell) are dropped: they follow the clock."""
    events = []
    for block in text.split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[len("event:"):].strip()
            elif line.startswith("data:"):
                data.append(line[len("data:"):].removeprefix(" "))
        if name is None and not data:
            continue
        joined = "\n".join(data)
        try:
            parsed = json.loads(joined)
        except ValueError:
            parsed = joined                              # "[DONE]"
        events.append({"event": name, "data": parsed})
    return events


def choices_in_turn(events: list[dict]) -> list[dict]:
    """A stream's events with n choices' chunks put one choice after the other. Each choice
    is a sequence of its own, so how their chunks interleave follows the clock (which one
    the engine step or the poll reached first); each choice's own order is kept, and the
    events of no single choice (the usage chunk, "[DONE]") keep theirs, after them."""
    def choice(event: dict) -> float:
        data = event["data"]
        chosen = data.get("choices") if isinstance(data, dict) else None
        return chosen[0].get("index", 0) if chosen and len(chosen) == 1 else math.inf
    return sorted(events, key=choice)                     # stable: each one's order stays


def answer_document(status: int, headers: list[tuple[str, str]], body: bytes) -> dict:
    """The comparable document of one answer, masked."""
    kept = {name.lower(): value for name, value in headers
            if name.lower() not in UNCOMPARED_HEADERS}
    kind = kept.get("content-type", "")
    text = body.decode("utf-8", errors="replace")
    if kind.startswith(SSE_TYPE):
        parsed = {"events": choices_in_turn(sse_events(text))}
    elif kind.startswith("application/json"):
        parsed = json.loads(text) if text else None
    else:
        parsed = text
    return mask({"status": status, "headers": kept, "body": parsed})


def send(host: str, port: int, request: ApiRequest) -> dict:
    """One request on a fresh connection -> its answer's document."""
    started = time.monotonic()
    try:
        return _send(host, port, request)
    finally:
        print(f"# {request.name}: {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)


def _send(host: str, port: int, request: ApiRequest) -> dict:
    conn = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT_S)
    try:
        conn.putrequest(request.method, request.path)
        payload = request.payload()
        if payload is not None or request.declared_bytes is not None:
            conn.putheader("Content-Type", "application/json")
            conn.putheader("Content-Length", str(request.declared_bytes or len(payload)))
        conn.endheaders(payload if request.declared_bytes is None else None)
        reply = conn.getresponse()
        return answer_document(reply.status, reply.getheaders(), reply.read())
    finally:
        conn.close()


def answers(checkout: Path, requests: list[ApiRequest]) -> tuple[dict[str, dict], float]:
    """A fresh server of `checkout`; each request's document by name; seconds it took."""
    started = time.monotonic()
    server = Server(None, {"TL_ENGINE__ACCESS_LOG": "off"}, checkout)
    try:
        host, port = server.http
        docs = {r.name: send(host, port, r) for r in requests}
    finally:
        code = server.stop()
    if code:
        raise SystemExit(f"the server of {checkout} exited with {code}:\n"
                         + "".join(server.log[-20:]))
    return docs, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, required=True, help="the checkout before the change")
    p.add_argument("--after", type=Path, default=REPO, help="the checkout after it")
    p.add_argument("--quick", action="store_true", help="the smoke subset of the requests")
    p.add_argument("--out", type=Path, default=None, help="write the report here as JSON")
    args = p.parse_args(argv)
    requests = request_set(args.quick)
    names = [r.name for r in requests]
    assert len(set(names)) == len(names), "request names must be unique"
    started = time.monotonic()
    before, before_s = answers(args.before.resolve(), requests)
    after, after_s = answers(args.after.resolve(), requests)
    compared = [d for name in names for d in differences(name, before[name], after[name])]
    found = [d for d in compared if not d.within_tolerance]
    near = len(compared) - len(found)
    for d in found:
        print(f"{d.request}: {d.path}\n  before: {json.dumps(d.before)[:300]}\n"
              f"  after:  {json.dumps(d.after)[:300]}")
    report = {"before": str(args.before), "after": str(args.after), "requests": len(requests),
              "differences": len(found), "floats_within_tolerance": near,
              "wall_s": round(time.monotonic() - started, 1), "before_s": round(before_s, 1),
              "after_s": round(after_s, 1), "found": [asdict(d) for d in found]}
    print(f"{len(found)} differences over {len(requests)} requests ({near} floats within "
          f"{FLOAT_TOLERANCE:g}); before {before_s:.1f} s, after {after_s:.1f} s, "
          f"{report['wall_s']:.1f} s in all")
    if args.out:
        args.out.write_text(json.dumps({**report, "documents": {"before": before, "after": after}},
                                       indent=1))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
