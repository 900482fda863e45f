"""Shared fixtures: the library (loaded once, loudly), the device under test,
dtypes, and a helper that puts numpy data on that device.

Environment:
  BUFKERN_LIBRARY       path to libbufkern.so (unset: the installed package's own copy)
  BK_TEST_DEVICE        cpu (default) or cuda:N: the device every primitive test runs on
  BK_TEST_REQUIRE_TORCH 1: a missing torch is a failure, not a skip
"""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

try:
    import bufkern
except ImportError:  # not installed: test the package of this checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import bufkern
from bufkern import _ffi

DEVICE = os.environ.get("BK_TEST_DEVICE", "cpu").strip() or "cpu"


def pytest_configure(config):
    try:
        _ffi.load()
    except _ffi.LibraryNotFoundError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config):
    info = bufkern.build_info()
    return [
        f"bufkern library: {bufkern.library_path()} (version {bufkern.version()})",
        f"bufkern backends: {info.get('backends', '?')}; device under test: {DEVICE}",
    ]


@pytest.fixture(scope="session")
def device():
    return DEVICE


@pytest.fixture(scope="session")
def ctx():
    """None (the thread's default context) on the CPU, an explicit context on a GPU."""
    if DEVICE == "cpu":
        yield None
        return
    c = bufkern.Context(DEVICE)
    yield c
    c.close()


@pytest.fixture(params=[np.float32, np.float64], ids=["f32", "f64"])
def dtype(request):
    return request.param


@pytest.fixture
def put(ctx):
    """put(array, dtype) -> a Buffer with a copy of the data on the device under test."""

    def _put(arr, dtype):
        return bufkern.from_numpy(np.asarray(arr, dtype=dtype), ctx=ctx)

    return _put


@pytest.fixture
def rng():
    return np.random.default_rng(20261129)

