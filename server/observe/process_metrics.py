"""The standard `process_*` metrics (Prometheus client conventions), read from /proc.

    process_cpu_seconds_total        user + system CPU time of this process
    process_resident_memory_bytes    resident set size now
    process_virtual_memory_bytes     virtual memory size now
    process_open_fds                 open file descriptors (sockets included)
    process_max_fds                  the soft RLIMIT_NOFILE
    process_start_time_seconds       start time, seconds since the Unix epoch

Linux reads `/proc/self/{stat,statm,fd}`; elsewhere a family whose source is missing is left
out rather than reported as 0 (a scraper then sees "absent", not a wrong value).
"""
from __future__ import annotations

import os
import resource
from pathlib import Path

PROC_SELF = Path("/proc/self")
PROC_STAT = Path("/proc/stat")
STAT_STARTTIME_FIELD = 21          # /proc/self/stat field 22 (1-based), after the comm field


def _family(name: str, kind: str, help_text: str, value: float) -> str:
    number = str(value) if isinstance(value, int) else repr(float(value))
    return f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n{name} {number}\n"


def _start_time_s() -> float | None:
    """Boot time + the process's start in clock ticks since boot."""
    try:
        stat = (PROC_SELF / "stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()       # after "pid (comm) "
        ticks = int(fields[STAT_STARTTIME_FIELD - 2])
        boot = next(int(line.split()[1]) for line in PROC_STAT.read_text().splitlines()
                    if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration, IndexError):
        return None


def _memory_bytes() -> tuple[int, int] | None:
    """(resident, virtual) bytes from /proc/self/statm (pages)."""
    try:
        size_pages, resident_pages = (PROC_SELF / "statm").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    page = os.sysconf("SC_PAGE_SIZE")
    return int(resident_pages) * page, int(size_pages) * page


def _open_fds() -> int | None:
    try:
        return len(os.listdir(PROC_SELF / "fd"))
    except OSError:
        return None


def process_metrics_text() -> str:
    times = os.times()
    parts = [_family("process_cpu_seconds_total", "counter",
                     "Total user and system CPU time spent in seconds.",
                     round(times.user + times.system, 3))]
    memory = _memory_bytes()
    if memory is not None:
        parts.append(_family("process_resident_memory_bytes", "gauge",
                             "Resident memory size in bytes.", memory[0]))
        parts.append(_family("process_virtual_memory_bytes", "gauge",
                             "Virtual memory size in bytes.", memory[1]))
    fds = _open_fds()
    if fds is not None:
        parts.append(_family("process_open_fds", "gauge", "Number of open file descriptors.",
                             fds))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        parts.append(_family("process_max_fds", "gauge",
                             "Maximum number of open file descriptors.", soft))
    start = _start_time_s()
    if start is not None:
        parts.append(_family("process_start_time_seconds", "gauge",
                             "Start time of the process since unix epoch in seconds.",
                             round(start, 2)))
    return "".join(parts)
