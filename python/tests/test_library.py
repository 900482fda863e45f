"""Library discovery, version and build facts, contexts, and error mapping."""

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import bufkern
from bufkern import _ffi


def test_version_and_build_info():
    assert re.fullmatch(r"\d+\.\d+\.\d+", bufkern.version())
    assert bufkern.version().split(".")[0] == bufkern.__version__.split(".")[0]
    info = bufkern.build_info()
    assert "cpu" in info["backends"].split()
    assert bufkern.cuda_device_count() >= 0


def test_status_strings_match_the_library():
    assert bufkern.status_string(0) == "ok"
    assert bufkern.status_string(100) == "invalid argument"
    assert bufkern.status_string(12345) == "unknown status"
    for code, name in bufkern.STATUS_NAMES.items():
        assert name.startswith("BK_")
        assert bufkern.status_string(code) != "unknown status"


def test_candidate_paths_order(monkeypatch):
    monkeypatch.setenv("BUFKERN_LIBRARY", "/some/where/libbufkern.so")
    assert _ffi.candidate_paths() == [("BUFKERN_LIBRARY", "/some/where/libbufkern.so")]
    monkeypatch.delenv("BUFKERN_LIBRARY")
    candidates = _ffi.candidate_paths()
    origins = [origin for origin, _ in candidates]
    pkg = os.path.dirname(os.path.abspath(bufkern.__file__))
    assert candidates[0] == ("package directory", os.path.join(pkg, "libbufkern.so"))
    assert origins[-1] == "ctypes.util.find_library('bufkern')"
    checkout = os.path.dirname(os.path.dirname(pkg))
    repo_paths = [p for o, p in candidates if o == "repository build directory"]
    if os.path.isfile(os.path.join(checkout, "include", "bufkern.h")):
        # The package inside a checkout: the checkout's build directory after the package's.
        assert origins.index("package directory") < origins.index("repository build directory")
        assert repo_paths[0] == os.path.join(checkout, "build", "libbufkern.so")
    else:
        # An installed package never looks next to site-packages for a build directory.
        assert repo_paths == []


def _run_python_args(args, **env_changes):
    env = dict(os.environ)
    # The child imports the same bufkern package as this process.
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(bufkern.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent] + [p for p in [env.get("PYTHONPATH")] if p])
    for k, v in env_changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          timeout=120)


def _run_python(code, **env_changes):
    return _run_python_args(["-c", textwrap.dedent(code)], **env_changes)


def test_missing_library_is_a_clear_error_at_first_use():
    code = """
        import bufkern
        try:
            bufkern.version()
        except bufkern.LibraryNotFoundError as exc:
            print("ERR", exc)
        else:
            print("LOADED")
    """
    r = _run_python(code, BUFKERN_LIBRARY="/nonexistent/libbufkern.so")
    assert r.returncode == 0, r.stderr
    assert "ERR" in r.stdout
    assert "/nonexistent/libbufkern.so" in r.stdout
    assert "BUFKERN_LIBRARY" in r.stdout


def test_library_path_is_the_one_requested():
    r = _run_python("import bufkern; print(bufkern.library_path())")
    assert r.returncode == 0, r.stderr
    if os.environ.get("BUFKERN_LIBRARY"):
        assert r.stdout.strip() == os.environ["BUFKERN_LIBRARY"]


def test_installed_package_loads_its_own_library():
    # `pip install ./python` puts the library into the package: with no override, an
    # installed package (one outside a checkout) loads that copy and no other.
    pkg = os.path.dirname(os.path.abspath(bufkern.__file__))
    if os.environ.get("BUFKERN_LIBRARY") or os.path.isfile(
        os.path.join(os.path.dirname(os.path.dirname(pkg)), "include", "bufkern.h")
    ):
        pytest.skip("the package is used from the checkout or BUFKERN_LIBRARY overrides it")
    r = _run_python("import bufkern; print(bufkern.library_path())", BUFKERN_LIBRARY=None)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == os.path.join(pkg, "libbufkern.so")


def test_module_info_names_the_library_and_its_build():
    r = _run_python_args(["-m", "bufkern", "info"])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"bufkern {bufkern.version()}"
    assert f"library: {bufkern.library_path()}" in lines
    assert f"backends: {bufkern.build_info()['backends']}" in lines
    assert f"cuda devices: {bufkern.cuda_device_count()}" in lines
    bad = _run_python_args(["-m", "bufkern", "infox"])
    assert bad.returncode == 2 and "unknown command infox" in bad.stderr


def test_error_carries_status_name_and_message(put):
    x = put(np.zeros(6), np.float64)
    with pytest.raises(bufkern.InvalidArgumentError) as info:
        bufkern.softmax(x, dims=(-2, -3), axis=1)
    err = info.value
    assert isinstance(err, bufkern.Error) and isinstance(err, ValueError)
    assert err.status == 100 and err.name == "BK_ERR_INVALID_ARGUMENT"
    assert "bk_softmax" in err.message and "dims" in err.message
    assert "BK_ERR_INVALID_ARGUMENT" in str(err)
    assert bufkern.last_error() == err.message


def test_dtype_mismatch_is_dtype_error(put):
    a = put(np.zeros((2, 3)), np.float32)
    w = put(np.zeros((2, 3)), np.float64)
    with pytest.raises(bufkern.DtypeError) as info:
        bufkern.xent_weighted_mean(a, w, rows=2, cols=3)
    assert info.value.status == 101 and isinstance(info.value, TypeError)


def test_null_input_is_null_error():
    with pytest.raises(bufkern.NullError) as info:
        bufkern.softmax(None, dims=(2,), axis=0)
    assert info.value.status == 103 and "x" in info.value.message


def test_length_mismatch_names_the_argument(put):
    x = put(np.zeros(6), np.float32)
    with pytest.raises(bufkern.InvalidArgumentError, match="x"):
        bufkern.rows_sum(x, rows=2, cols=4)


def test_negative_size_is_rejected_by_the_library(put):
    x = put(np.zeros(6), np.float32)
    with pytest.raises(bufkern.InvalidArgumentError, match="rows = -1"):
        bufkern.rows_sum(x, rows=-1, cols=6)


def test_python_side_argument_checks(put):
    x = put(np.zeros(6), np.float32)
    with pytest.raises(bufkern.InvalidArgumentError, match="does not fit in int64"):
        bufkern.rows_sum(x, rows=2**70, cols=3)
    with pytest.raises(TypeError, match="rows must be an integer"):
        bufkern.rows_sum(x, rows=2.0, cols=3)
    with pytest.raises(bufkern.InvalidArgumentError, match="does not fit in a C int"):
        bufkern.softmax(x, dims=(6,), axis=2**40)
    with pytest.raises(TypeError, match="ctx"):
        bufkern.rows_sum(x, rows=2, cols=3, ctx=3.5)
    assert bufkern.rows_sum(x, rows=np.int64(2), cols=np.int32(3)).shape == (2,)


def test_unknown_status_maps_to_internal_error():
    err = _ffi.make_error(999, "strange")
    assert isinstance(err, bufkern.InternalError) and err.status == 999


# ---- contexts ---------------------------------------------------------------------


def test_cpu_context_basics():
    with bufkern.Context("cpu") as c:
        assert c.device == "cpu" and not c.is_cuda
        c.synchronize()
        with pytest.raises(bufkern.UnsupportedError) as info:
            c.set_stream(5)
        assert info.value.status == 200
        x = bufkern.from_numpy(np.arange(6.0), ctx=c)
        y = bufkern.rows_sum(x, rows=2, cols=3, ctx=c)
    # Buffers outlive the context that made them.
    np.testing.assert_array_equal(y.numpy(), [3.0, 12.0])
    c.close()
    with pytest.raises(ValueError, match="closed"):
        c.synchronize()
    with pytest.raises(ValueError, match="closed"):
        bufkern.rows_sum(x, rows=2, cols=3, ctx=c)


def test_bad_devices():
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.Context("tpu:0")
    with pytest.raises(bufkern.InvalidArgumentError) as info:
        bufkern.Context("cpu:1")
    assert "index" in info.value.message
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.Context(("cuda", -1))


def test_cuda_context_availability():
    backends = bufkern.build_info()["backends"].split()
    if "cuda" not in backends:
        with pytest.raises(bufkern.UnsupportedError) as info:
            bufkern.Context("cuda:0")
        assert info.value.status == 200
    else:
        count = bufkern.cuda_device_count()
        with pytest.raises(bufkern.NoDeviceError) as info:
            bufkern.Context(f"cuda:{count}")
        assert info.value.status == 301


def test_device_mismatch(device):
    if not device.startswith("cuda"):
        pytest.skip("needs BK_TEST_DEVICE=cuda:N (a CPU buffer with a GPU context)")
    with bufkern.Context(device) as c:
        x = bufkern.from_numpy(np.zeros(6, np.float32))
        with pytest.raises(bufkern.DeviceMismatchError) as info:
            bufkern.rows_sum(x, rows=2, cols=3, ctx=c)
        assert info.value.status == 102
        arr = np.zeros(4, np.float32)
        with pytest.raises(bufkern.DeviceMismatchError):
            bufkern.from_dlpack(arr, ctx=c)
