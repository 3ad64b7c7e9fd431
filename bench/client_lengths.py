"""Structured-output clients against two checkouts, side by side in one run: how many of
their answers end at the token limit (a small model looping in JSON runs to `max_tokens`).

For each checkout (`--before DIR`, `--after DIR`; the order alternates by round) a fresh
server on smol-135m, then 20 fixed prompts through each client, the clients at once (four
streams):

  instructor   JSON mode, a pydantic model (tests/e2e/instructor_client.py in .venv-instructor)
  langchain    ChatOpenAI.with_structured_output(method="json_mode", include_raw=True), on the
               biographies (keys named in the prompt) and on 20 open requests ("... as JSON",
               keys left to the model: where a small model loops on its keys)
  ai-sdk       generateObject, and a tool forced by name, through the AI SDK's Responses
               provider (tests/e2e/node/ai_sdk_objects.mjs)
  extract      bench/spec_tasks.py's extraction task (json_schema, strict), 20 of its e-mails

Each client words its request its own way, so no server gets one request twice (the suffix
store would draft an answer it gave before). Prints, per checkout and client, the answers
that ended in `length`, those that raised, the rest, and (LangChain's) the answers with a key
written twice in one object; then one JSON line.

    python bench/client_lengths.py --before ../before --after .
"""
from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

import openai
import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.child_server import Server                              # noqa: E402
from bench.spec_tasks import extract_doc, support_email            # noqa: E402

MODEL_DIR = REPO / "artifacts" / "models" / "smol-135m"
INSTRUCTOR_PYTHON = REPO / ".venv-instructor" / "bin" / "python"
INSTRUCTOR_DRIVER = REPO / "tests" / "e2e" / "instructor_client.py"
AI_SDK_DRIVER = REPO / "tests" / "e2e" / "node" / "ai_sdk_objects.mjs"
PROMPTS = 20
JSON_MAX_TOKENS = 160           # a person object needs ~30; a loop runs to the limit
EXTRACT_MAX_TOKENS = 400        # as bench/spec_tasks.py
CLIENT_TIMEOUT_S = 1800
LANGCHAIN_STREAMS = 2           # LangChain's requests in flight at once
PEOPLE = (("Maria Lindqvist", "nurse"), ("Tom Okafor", "teacher"), ("Aiko Tanaka", "engineer"),
          ("Pedro Alves", "baker"), ("Lena Novak", "pilot"), ("Omar Haddad", "architect"),
          ("Grace Chen", "lawyer"), ("Ivan Petrov", "chef"), ("Sofia Rossi", "dentist"),
          ("Kwame Mensah", "farmer"))


def person_prompts() -> list[str]:
    """Twenty short biographies: ten people, two wordings each, ages from a fixed rule."""
    out = []
    for k in range(PROMPTS):
        name, job = PEOPLE[k % len(PEOPLE)]
        age = 21 + (13 * k) % 50
        out.append(f"{name} is {age} years old and works as a {job}." if k < len(PEOPLE) else
                   f"Meet {name}, a {job} aged {age}.")
    return out


OPEN_ASKS = ("the roles in a chat", "a user profile", "a conversation between two people",
             "the settings of a web app", "a recipe for pancakes", "a library's books",
             "the planets of the solar system", "a company's departments", "a weather report",
             "a shopping cart")


def open_prompts() -> list[str]:
    """Twenty requests for JSON whose keys the model chooses (ten topics, two wordings)."""
    return [f"Give a JSON object with keys for {ask}." if k < len(OPEN_ASKS) else
            f"Describe {ask} as JSON." for k, ask in enumerate(OPEN_ASKS * 2)]


def repeated_keys(text: str) -> list[str]:
    """The keys written twice in one object of a (possibly cut) JSON text: a plain scanner
    of its own, strings and nesting only."""
    stack, repeats, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            end = i + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            word, after = text[i + 1:end], text[end + 1:].lstrip()
            if stack and stack[-1] is not None and after.startswith(":"):
                if word in stack[-1]:
                    repeats.append(word)
                stack[-1].add(word)
            i = end + 1
            continue
        if ch in "{[":
            stack.append(set() if ch == "{" else None)
        elif ch in "}]" and stack:
            stack.pop()
        i += 1
    return repeats


def run_driver(command: list[str]) -> list[dict]:
    run = subprocess.run(command, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
    if run.returncode != 0:
        raise SystemExit(f"{command[1]} failed:\n{run.stderr[-2000:]}")
    return [json.loads(line) for line in run.stdout.splitlines()]


def instructor_calls(base_url: str, model: str, prompts_file: str) -> dict[str, list[dict]]:
    return {"instructor": run_driver([str(INSTRUCTOR_PYTHON), str(INSTRUCTOR_DRIVER), base_url, model,
                                      prompts_file, str(JSON_MAX_TOKENS)])}


def ai_sdk_calls(base_url: str, model: str, prompts_file: str) -> dict[str, list[dict]]:
    lines = run_driver(["node", str(AI_SDK_DRIVER), base_url, model, prompts_file,
                        str(JSON_MAX_TOKENS)])
    return {f"ai-sdk {call}": [line for line in lines if line["call"] == call]
            for call in ("generateObject", "forcedTool")}


def langchain_calls(base_url: str, model: str, prompts: list[str]) -> dict[str, list[dict]]:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=model, base_url=base_url, api_key="unused", temperature=0,
                     max_tokens=JSON_MAX_TOKENS, max_retries=0, timeout=600)
    structured = llm.with_structured_output(None, method="json_mode", include_raw=True)

    def ask(text: str) -> dict:
        try:
            answer = structured.invoke(text)
        except openai.LengthFinishReasonError as cut:         # the client's word for `length`
            text = cut.completion.choices[0].message.content or ""
            return {"finish": "length", "error": None, "repeats": bool(repeated_keys(text))}
        return {"finish": answer["raw"].response_metadata.get("finish_reason"),
                "error": None if answer["parsing_error"] is None
                else type(answer["parsing_error"]).__name__,
                "repeats": bool(repeated_keys(answer["raw"].content))}
    with ThreadPoolExecutor(LANGCHAIN_STREAMS) as pool:
        named = pool.map(ask, [f"Answer in JSON with the keys name, age and job. {p}" for p in prompts])
        open_ = pool.map(ask, open_prompts())
        return {"langchain": list(named), "langchain open": list(open_)}


def extract_calls(base_url: str, model: str) -> dict[str, list[dict]]:
    out = []
    for k in range(PROMPTS):
        body = {**extract_doc(support_email(k)), "model": model, "temperature": 0,
                "max_tokens": EXTRACT_MAX_TOKENS}
        reply = requests.post(base_url + "/chat/completions", json=body, timeout=600)
        choice = reply.json()["choices"][0] if reply.ok else None
        out.append({"finish": choice and choice["finish_reason"],
                    "error": None if reply.ok else str(reply.status_code)})
    return {"extract": out}


def measure(checkout: Path, only: set[str]) -> dict[str, Counter]:
    """One fresh server of `checkout`; the clients (`only` of them, if named) at once;
    counts per client."""
    server = Server(str(MODEL_DIR), env={"TL_ENGINE__ACCESS_LOG": "off"}, repo=checkout)
    base_url = f"http://{server.http[0]}:{server.http[1]}/v1"
    model = MODEL_DIR.name
    prompts = person_prompts()
    results: dict[str, list[dict]] = {}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(prompts, f)
    clients = {"instructor": lambda: instructor_calls(base_url, model, f.name),
               "ai-sdk": lambda: ai_sdk_calls(base_url, model, f.name),
               "langchain": lambda: langchain_calls(base_url, model, prompts),
               "extract": lambda: extract_calls(base_url, model)}
    jobs = [job for name, job in clients.items() if not only or name in only]
    threads = [threading.Thread(target=lambda job=job: results.update(job())) for job in jobs]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        server.stop()
        Path(f.name).unlink()
    return {client: Counter(["length" if line["finish"] == "length" else
                             "error" if line["error"] else "ok" for line in lines]
                            + ["repeated keys" for line in lines if line.get("repeats")])
            for client, lines in sorted(results.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the checkout before the change")
    parser.add_argument("--after", type=Path, default=REPO, help="the checkout after it")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", default="", help="clients to run, comma-separated "
                        "(instructor, ai-sdk, langchain, extract); default: all")
    args = parser.parse_args()
    only = {name for name in args.only.split(",") if name}
    table: dict[str, dict[str, Counter]] = {"before": {}, "after": {}}
    for r in range(args.rounds):
        order = (("before", args.before), ("after", args.after))
        for side, checkout in (order if r % 2 == 0 else order[::-1]):
            for client, counts in measure(checkout.resolve(), only).items():
                table[side].setdefault(client, Counter()).update(counts)
    for client in sorted(table["after"]):
        b, a = table["before"].get(client, Counter()), table["after"][client]
        print(f"{client:24s} length {b['length']:3d} -> {a['length']:3d}   "
              f"errors {b['error']:3d} -> {a['error']:3d}   ok {b['ok']:3d} -> {a['ok']:3d}   "
              f"repeated keys {b['repeated keys']:3d} -> {a['repeated keys']:3d}")
    print(json.dumps({side: {c: dict(v) for c, v in t.items()} for side, t in table.items()}))


if __name__ == "__main__":
    main()
