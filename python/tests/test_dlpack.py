"""DLPack interchange with numpy: zero copies, ownership, failures."""

import ctypes
import gc
import sys

import numpy as np
import pytest

import bufkern
from bufkern import _ffi


def _ptr(arr):
    return arr.__array_interface__["data"][0]


def _capsule_name(capsule):
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype, get.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return get(capsule)


def _numpy_reads_dlpack_1():
    """Whether this numpy asks producers for DLPack 1.0 (max_version), so
    that a read-only export can share memory with it; older ones get copies."""
    b = bufkern.from_numpy(np.zeros(2))
    return _ptr(np.from_dlpack(b)) == b.data_ptr


NUMPY_DLPACK_1 = _numpy_reads_dlpack_1()
needs_dlpack_1 = pytest.mark.skipif(not NUMPY_DLPACK_1, reason="numpy asks for DLPack 0.x: exports are copies")


def test_numpy_from_dlpack_shares_memory_read_only(dtype, rng):
    a = rng.standard_normal(10).astype(dtype)
    b = bufkern.from_numpy(a)
    v = np.from_dlpack(b)
    assert v.dtype == dtype and v.shape == (10,)
    assert not v.flags.writeable
    assert (_ptr(v) == b.data_ptr) == NUMPY_DLPACK_1
    np.testing.assert_array_equal(v, a)


def test_bufkern_from_dlpack_shares_numpy_memory(dtype, rng):
    a = rng.standard_normal((3, 4)).astype(dtype)
    b = bufkern.from_dlpack(a)
    assert b.data_ptr == _ptr(a)
    assert b.shape == (3, 4) and b.dtype == dtype and b.device == "cpu"
    y = bufkern.softmax(b, dims=(3, 4), axis=1)
    np.testing.assert_allclose(y.numpy(), np.exp(a) / np.exp(a).sum(1, keepdims=True),
                               rtol=1e-5 if dtype == np.float32 else 1e-12)


@needs_dlpack_1
def test_round_trip_numpy_bufkern_numpy_is_copy_free():
    a = np.arange(6.0)
    back = np.from_dlpack(bufkern.from_dlpack(a))
    assert _ptr(back) == _ptr(a)
    np.testing.assert_array_equal(back, a)


def test_buffer_to_buffer_through_dlpack():
    b = bufkern.from_numpy(np.arange(4.0, dtype=np.float32))
    c = bufkern.from_dlpack(b)
    assert c.data_ptr == b.data_ptr
    b.close()
    np.testing.assert_array_equal(c.numpy(), np.arange(4.0, dtype=np.float32))


def test_dlpack_device_and_capsule_name():
    b = bufkern.from_numpy(np.zeros(3))
    assert b.__dlpack_device__() == (1, 0)
    cap = b.__dlpack__(max_version=(1, 0))
    assert _capsule_name(cap) == b"dltensor_versioned"
    c = bufkern.from_dlpack(cap)  # a raw capsule is accepted
    assert _capsule_name(cap) == b"used_dltensor_versioned"
    assert c.data_ptr == b.data_ptr
    with pytest.raises(BufferError, match="already consumed"):
        bufkern.from_dlpack(cap)
    legacy = b.__dlpack__()  # a consumer that cannot be told "read-only" gets a copy
    assert _capsule_name(legacy) == b"dltensor"
    d = bufkern.from_dlpack(legacy)
    assert _capsule_name(legacy) == b"used_dltensor"
    assert d.data_ptr != b.data_ptr and d.shape == (3,)


def test_unconsumed_capsule_runs_the_deleter():
    a = np.arange(5.0)
    base = sys.getrefcount(a)
    b = bufkern.from_dlpack(a)  # holds numpy's tensor, hence a reference to a
    cap = b.__dlpack__(max_version=(1, 0))  # holds a reference to the buffer
    b.close()
    gc.collect()
    assert sys.getrefcount(a) == base + 1
    del cap  # never consumed: its destructor calls the tensor's deleter
    gc.collect()
    assert sys.getrefcount(a) == base


@needs_dlpack_1
def test_consumed_capsule_is_owned_by_the_consumer():
    a = np.arange(5.0)
    base = sys.getrefcount(a)
    b = bufkern.from_dlpack(a)
    view = np.from_dlpack(b)
    b.close()
    gc.collect()
    assert sys.getrefcount(a) == base + 1  # numpy's view keeps the chain alive
    np.testing.assert_array_equal(view, np.arange(5.0))
    del view
    gc.collect()
    assert sys.getrefcount(a) == base


def test_failed_import_leaves_the_capsule_to_its_producer():
    strided = np.arange(12.0).reshape(3, 4)[:, ::2]
    base = sys.getrefcount(strided)
    message = None
    try:
        bufkern.from_dlpack(strided)
    except bufkern.InvalidArgumentError as exc:  # not kept: its frames hold the capsule
        message = exc.message
    assert message is not None and "strides" in message
    gc.collect()
    assert sys.getrefcount(strided) == base  # numpy's capsule destructor released it
    with pytest.raises(bufkern.DtypeError):
        bufkern.from_dlpack(np.arange(4, dtype=np.int32))
    cap = np.arange(3.0, dtype=np.float16).__dlpack__()
    with pytest.raises(bufkern.DtypeError):
        bufkern.from_dlpack(cap)
    assert _capsule_name(cap) == b"dltensor"  # still the producer's


def test_transposed_unit_extent_strides_are_accepted():
    a = np.arange(4.0).reshape(4, 1).T  # strides differ only on an extent-1 axis
    b = bufkern.from_dlpack(a)
    np.testing.assert_array_equal(b.numpy().reshape(-1), np.arange(4.0))


@needs_dlpack_1
def test_export_options():
    b = bufkern.from_numpy(np.arange(4.0))
    same = np.from_dlpack(b, copy=False)
    assert _ptr(same) == b.data_ptr
    copied = np.from_dlpack(b, copy=True)
    assert _ptr(copied) != b.data_ptr
    np.testing.assert_array_equal(copied, np.arange(4.0))
    cap = b.__dlpack__(copy=True)
    c = bufkern.from_dlpack(cap)
    assert c.data_ptr != b.data_ptr
    cap = b.__dlpack__(max_version=(1, 0), dl_device=(1, 0))
    assert _capsule_name(cap) == b"dltensor_versioned"
    assert _capsule_name(b.__dlpack__(max_version=(0, 8))) == b"dltensor"
    with pytest.raises(BufferError):
        b.__dlpack__(dl_device=(2, 0), copy=False)
    with pytest.raises(BufferError):
        b.__dlpack__(dl_device=(2, 0))


def test_empty_buffers_cross_dlpack(dtype):
    e = bufkern.from_numpy(np.zeros(0, dtype))
    v = np.from_dlpack(e)
    assert v.shape == (0,) and v.dtype == dtype
    back = bufkern.from_dlpack(np.zeros((0, 3), dtype))
    assert back.length == 0 and back.shape == (0, 3)


def test_objects_without_dlpack_are_rejected():
    with pytest.raises(TypeError, match="__dlpack__"):
        bufkern.from_dlpack(object())
    with pytest.raises(BufferError):
        bufkern.from_dlpack(_ffi.PyCapsule_New(1, _ffi.ADDR_USED, _ffi.CAPSULE_DESTRUCTOR))


def test_gpu_buffer_to_numpy_copies(device):
    if not device.startswith("cuda"):
        pytest.skip("needs BK_TEST_DEVICE=cuda:N")
    with bufkern.Context(device) as c:
        b = bufkern.from_numpy(np.arange(6.0), ctx=c)
        assert b.__dlpack_device__() == (2, int(device.split(":")[1]))
        host = np.from_dlpack(b, device="cpu")  # dl_device=(kDLCPU, 0): exported as a copy
        np.testing.assert_array_equal(host, np.arange(6.0))
        with pytest.raises(BufferError):
            b.__dlpack__(dl_device=(1, 0), copy=False)
        with pytest.raises(BufferError):
            b.numpy(copy=False)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_capsule_destroyed_by_a_failing_consumer_is_released():
    # numpy cannot import a tensor on an unknown device: it raises and drops
    # the capsule with its exception set. The destructor must still run the
    # deleter (the exception itself cannot survive a ctypes callback).
    calls = []
    deleter = _ffi.DLDeleter(lambda p: calls.append(p))
    managed = _ffi.DLManagedTensor()
    managed.dl_tensor.device.device_type = 99
    managed.dl_tensor.dtype.code, managed.dl_tensor.dtype.bits, managed.dl_tensor.dtype.lanes = 2, 32, 1
    managed.deleter = deleter

    class Producer:
        def __dlpack__(self, *args, **kwargs):
            return _ffi.new_capsule(ctypes.addressof(managed))

        def __dlpack_device__(self):
            return (99, 0)

    for _ in range(3):
        with pytest.raises((SystemError, RuntimeError, BufferError)):
            np.from_dlpack(Producer())
    assert len(calls) == 3
    cap = Producer().__dlpack__()
    del cap
    assert len(calls) == 4
