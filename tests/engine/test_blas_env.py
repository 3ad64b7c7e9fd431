"""OpenBLAS's spin setting: set before numpy loads, never over the operator's value."""
from __future__ import annotations

import subprocess
import sys

from engine.blas_env import OPENBLAS_TIMEOUT_ENV, SPIN_LOG2_CYCLES, tune_blas_threads


def test_an_operators_value_wins_and_a_loaded_numpy_is_left_alone():
    environ = {OPENBLAS_TIMEOUT_ENV: "28"}
    assert "numpy" in sys.modules                       # pytest's process: too late to set
    assert tune_blas_threads(environ) is False and environ[OPENBLAS_TIMEOUT_ENV] == "28"
    assert tune_blas_threads({}) is False               # numpy is loaded here


def test_the_entry_point_sets_it_before_numpy_loads():
    # a job that reports what it finds when it starts: the variable set, numpy not loaded
    code = ("import os, sys, tlserve\n"
            "tlserve.SUBCOMMANDS['probe'] = lambda argv: print(os.environ.get("
            f"'{OPENBLAS_TIMEOUT_ENV}'), 'numpy' in sys.modules) or 0\n"
            "tlserve.main(['probe'])")
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=".", check=True).stdout.split()
    assert out[-2:] == [str(SPIN_LOG2_CYCLES), "False"]
