"""The Batch API's parts in a server, built and started and stopped together.

    BatchStore ([batch].dir) -- BatchWorker (its thread) -- an ApiApp of its own
        (its own ServerState, so its streams' metric callbacks stay on the worker's
        thread; every generation at BATCH_PRIORITY) -- an off-loop pool of its own
        (so its preparations wake the worker, not the loop)

The engine threads wake one callable: `FanOutWake` calls the loop's and the worker's, so
each finished step reaches whichever thread polls the stream. `metrics_text` renders the
batch families for /metrics (read from the loop thread: the store and the worker's
counters take their own locks).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from server.api.app import ApiApp
from server.batch.runner import Wake
from server.batch.settings import BatchConfig
from server.batch.store import BatchStore
from server.batch.worker import BATCH_PRIORITY, BatchApi, BatchWorker
from server.loading import LoadedModels
from server.observe.prom_text import family
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
    api: BatchApi
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
        return BatchService(BatchApi(store, worker, cfg.max_file_mib * MIB), wake, pool)

    def start(self) -> None:
        """After the models' threads: the worker resumes what a last run left."""
        self.pool.start()
        self.api.worker.start()

    def stop(self, join_s: float) -> None:
        """Finish the batch requests in flight (checkpointed), then the pool."""
        self.api.worker.stop(join_s)
        self.pool.stop()

    def metrics_text(self) -> str:
        done, failed, queued = self.api.worker.stats.read()
        by_status = self.api.store.counts_by_status()
        return (family("tl_batches", "gauge", "Batches by status.",
                       [((("status", status),), n) for status, n in by_status.items()])
                + family("tl_batch_requests_total", "counter",
                         "Batch requests answered since start, by outcome.",
                         [((("outcome", "done"),), done), ((("outcome", "failed"),), failed)])
                + family("tl_batch_queue_depth", "gauge",
                         "Lines of the running batch not yet answered.", [((), queued)]))
