"""The Batch API's parts in a server, built, started and stopped together (serve.py).

    BatchStore ([batch].dir) -- StoredBatches (what the API's handlers call)
    BatchWorker (its own thread) -- an ApiApp of its own: its own ServerState, so its
        streams' metric callbacks run on the worker's thread and touch no counter the
        loop thread writes; every generation at BATCH_PRIORITY, below every client's
    an off-loop pool of its own, which wakes the worker (not the loop)

The engine threads wake one callable: `FanOutWake` calls the loop's and the worker's, so
each finished step reaches whichever thread polls the stream. `reading` is what /metrics
shows of it (taken from the loop thread: the store and the counters take their locks).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from server.api.app import ApiApp
from server.batch.backend import StoredBatches
from server.batch.runner import Wake
from server.batch.settings import BatchConfig
from server.batch.store import BatchStore
from server.batch.worker import BATCH_PRIORITY, BatchWorker
from server.loading import LoadedModels
from server.observe.metrics import BatchReading
from server.offloop.pool import OffLoopPool
from server.state import ServerState

BATCH_OFFLOOP_THREADS = 1      # the worker's preparations: one at a time is plenty
MIB = 2 ** 20


class FanOutWake:
    """One wake for the engine threads that wakes several waiters (each safe from any
    thread)."""

    def __init__(self, *wakes: Callable[[], None]):
        self.wakes = wakes

    def __call__(self) -> None:
        for wake in self.wakes:
            wake()


@dataclass
class BatchService:
    backend: StoredBatches
    worker: BatchWorker
    wake: Wake
    pool: OffLoopPool

    @staticmethod
    def build(cfg: BatchConfig, loaded: LoadedModels, *, ping_interval_s: float,
              max_stop_strings: int) -> "BatchService":
        store = BatchStore(cfg.dir, max_dir_bytes=cfg.max_dir_mib * MIB)
        wake = Wake()
        pool = OffLoopPool(threads=BATCH_OFFLOOP_THREADS, wake=wake, name="tl-batch-offloop")
        app = ApiApp(chats=loaded.chats, state=ServerState(), ping_interval_s=ping_interval_s,
                     offloop=pool, encoders=loaded.encoders, max_stop_strings=max_stop_strings,
                     fixed_priority=BATCH_PRIORITY)
        worker = BatchWorker(store, app, wake, max_running=cfg.max_running)
        backend = StoredBatches(store, worker, max_file_bytes=cfg.max_file_mib * MIB)
        return BatchService(backend, worker, wake, pool)

    def start(self) -> None:
        """After the models' threads: the worker resumes what a last run left."""
        self.pool.start()
        self.worker.start()

    def stop(self, join_s: float) -> None:
        """Finish the batch requests in flight (checkpointed), then the pool."""
        self.worker.stop(join_s)
        self.pool.stop()

    def reading(self) -> BatchReading:
        done, failed, _ = self.worker.stats.read()
        return BatchReading(by_status=self.backend.store.counts_by_status(),
                            requests_done=done, requests_failed=failed,
                            queued_lines=self.worker.queued_lines())
