"""A disk for the spool's writer that the test controls: writes wait for a gate, may fail
(ENOSPC) at a chosen write, and note which thread made them."""
from __future__ import annotations

import errno
import threading

from server.batch.spool import SpoolWriter

WAIT_S = 5.0


class GatedFile:
    """A file whose writes wait for `gate` and note the thread that made them."""

    def __init__(self, path, gate: threading.Event, fail_at_write: int | None = None):
        self.real = open(path, "wb")
        self.gate, self.fail_at_write = gate, fail_at_write
        self.threads: set[int] = set()
        self.num_writes = 0

    def write(self, data):
        self.threads.add(threading.get_ident())
        assert self.gate.wait(WAIT_S)
        self.num_writes += 1
        if self.num_writes == self.fail_at_write:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.real.write(data)

    def close(self):
        self.real.close()


def gated_writer(gate, fail_at_write=None):
    files = []

    def open_file(path):
        files.append(GatedFile(path, gate, fail_at_write))
        return files[-1]

    return SpoolWriter(open_file), files
