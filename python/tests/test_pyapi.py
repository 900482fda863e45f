"""The numpy-style API: shapes inferred, negative axes, keyword geometry
checked against the shape, the conversion rule per source, dtypes and
devices given in every form, read-only exports, and int range checks."""

import array
import subprocess
import sys
import textwrap
import os

import numpy as np
import pytest

import bkref
import bufkern


def test_shape_inference_and_negative_axes():
    x = np.random.default_rng(1).standard_normal((4, 5))
    y = bufkern.softmax(x, axis=-1)
    assert y.shape == (4, 5) and y.dtype == np.float64
    bkref.assert_close(y.numpy(), bkref.softmax(x, 1), np.float64, "red", scale=1.0)
    bkref.assert_close(bufkern.softmax(x, axis=-2).numpy(), bkref.softmax(x, 0), np.float64, "red", scale=1.0)
    assert bufkern.sum_axis(np.ones((2, 3, 4)), -2).shape == (2, 4)
    assert bufkern.swap_adjacent(np.zeros((2, 3, 4)), -1).shape == (2, 4, 3)
    assert bufkern.rows_sum(np.ones((2, 3, 4))).shape == (2, 3)
    out, norm, inv = bufkern.layernorm_forward(np.ones((2, 3, 4)), np.ones(4), np.zeros(4), 1e-5)
    assert out.shape == (2, 3, 4) and inv.shape == (2, 3)
    c = bufkern.bmm(np.ones((2, 3)), np.ones((3, 4)))
    assert c.shape == (2, 4) and (c.numpy() == 3.0).all()
    assert bufkern.bmm(np.ones((5, 3, 2)), np.ones((5, 4, 3)), transpose_a=True, transpose_b=True).shape == (5, 2, 4)
    g = bufkern.rows_gather(np.arange(6.0).reshape(3, 2), np.array([2, 0], np.int64))
    assert g.shape == (2, 2) and g.numpy().tolist() == [[4.0, 5.0], [0.0, 1.0]]
    assert bufkern.rfft(np.ones((3, 8))).shape == (3, 5, 2)
    assert bufkern.irfft(bufkern.rfft(np.ones((3, 8)))).shape == (3, 8)
    assert bufkern.broadcast_to([1.0, 2.0], (3, 2)).numpy().tolist() == [[1.0, 2.0]] * 3
    assert bufkern.conv(np.ones((1, 1, 4)), np.ones((1, 1, 2)), padding=1).shape == (1, 1, 5)
    assert bufkern.xent_weighted_mean([[0.0, 1.0]], [[1.0, 0.0]]).shape == ()
    with pytest.raises(bufkern.InvalidArgumentError, match="axis = 2 is outside"):
        bufkern.softmax(x, axis=2)


def test_geometry_keywords_are_checked_against_the_shape():
    x = np.ones((4, 5))
    with pytest.raises(bufkern.InvalidArgumentError, match=r"dims = \(5, 4\) does not describe x of shape \(4, 5\)"):
        bufkern.softmax(x, dims=(5, 4), axis=1)
    with pytest.raises(bufkern.InvalidArgumentError, match="rows = 5, cols = 4"):
        bufkern.rows_sum(x, rows=5, cols=4)
    with pytest.raises(bufkern.InvalidArgumentError, match="batch, m, n, p"):
        bufkern.bmm(np.ones((2, 3)), np.ones((3, 4)), batch=1, m=3, n=2, p=4)
    # A flat input takes any geometry of its length; the result has that shape.
    y = bufkern.softmax(np.ones(20), dims=(4, 5), axis=1)
    assert y.shape == (4, 5)
    assert bufkern.rows_sum(np.ones(20), rows=4, cols=5).shape == (4,)
    assert bufkern.bmm(np.ones(6), np.ones(12), batch=1, m=2, n=3, p=4).shape == (1, 2, 4)


def test_out_of_range_ints_are_rejected_before_the_call():
    with pytest.raises(bufkern.InvalidArgumentError, match="depth"):
        bufkern.swap_adjacent(np.ones(6), dims=[2, 3], depth=2**31 - 1)
    with pytest.raises(bufkern.InvalidArgumentError, match="does not fit in a C int"):
        bufkern.swap_adjacent(np.ones(6), dims=[2, 3], depth=2**31)
    with pytest.raises(bufkern.InvalidArgumentError, match="axis"):
        bufkern.sum_axis(np.ones(6), -(2**31))


def test_swap_adjacent_extreme_depth_does_not_kill_the_interpreter():
    code = textwrap.dedent("""
        import numpy as np, bufkern
        for call in (lambda: bufkern.swap_adjacent(np.ones(6), [2, 3], 2**31 - 1),
                     lambda: bufkern.swap_adjacent(np.ones(6), dims=[2, 3], depth=2**31 - 1)):
            try:
                call()
            except (TypeError, bufkern.Error) as exc:
                print("raised", type(exc).__name__)
    """)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(bufkern.__file__))]
                                        + [p for p in [env.get("PYTHONPATH")] if p])
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("raised") == 2


def test_conversion_rule_per_source():
    base = np.arange(12.0).reshape(3, 4)
    ref = base.sum(-1)
    sources = {
        "numpy": base,
        "non-contiguous": np.asfortranarray(base),
        "transposed view": base.T.copy().T,
        "big-endian": base.astype(">f8"),
        "int64": base.astype(np.int64),
        "bool": (base > 5),
        "list": base.tolist(),
        "buffer protocol": memoryview(array.array("d", base.reshape(-1))),
    }
    for name, src in sources.items():
        got = bufkern.rows_sum(src)
        expected = (base > 5).sum(-1) if name == "bool" else (ref if name != "buffer protocol" else [base.sum()])
        assert got.dtype == np.float64, name
        np.testing.assert_array_equal(got.numpy().reshape(-1), np.asarray(expected, float).reshape(-1), err_msg=name)
    # Integer data and lists take the dtype of the call's float inputs.
    m = bufkern.rows_masked_softmax(np.zeros((2, 2), np.float32), [[1, 0], [0, 1]])
    assert m.dtype == np.float32 and m.numpy().tolist() == [[1.0, 0.0], [0.0, 1.0]]
    with pytest.raises(bufkern.DtypeError, match="float16"):
        bufkern.rows_sum(np.ones((2, 2), np.float16))
    with pytest.raises(bufkern.DtypeError, match="complex128"):
        bufkern.rows_sum(np.ones((2, 2), complex))
    with pytest.raises(bufkern.DtypeError, match="float16"):
        bufkern.from_dlpack(np.ones(3, np.float16))
    with pytest.raises(bufkern.DtypeError, match="int32"):
        bufkern.from_dlpack(np.ones(3, np.int32))


def test_zero_copy_sharing_of_compact_numpy_inputs():
    a = np.arange(6.0)
    assert bufkern.as_buffer(a).data_ptr == a.ctypes.data
    assert bufkern.as_buffer(a[::2]).data_ptr != a.ctypes.data


def test_read_only_exports_keep_the_shape():
    b = bufkern.from_numpy(np.arange(6.0).reshape(2, 3))
    v = np.from_dlpack(b)
    assert v.shape == (2, 3)
    if v.ctypes.data == b.data_ptr:  # a consumer of DLPack 1.0: shared, read only
        assert not v.flags.writeable
    else:  # an older consumer: its own copy
        assert v.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert b.numpy()[0, 0] == 0.0
    assert np.asarray(b).shape == (2, 3)
    view = b.numpy(copy=False)
    assert not view.flags.writeable and view.ctypes.data == b.data_ptr
    with pytest.raises(BufferError, match="copy=False"):
        b.__dlpack__(copy=False)
    assert bufkern.from_dlpack(b).shape == (2, 3)


def test_dtypes_in_every_form():
    for d in ("float64", "f8", "double", np.float64, np.dtype("float64")):
        assert bufkern.zeros(2, d).dtype == np.float64
    for d in ("float32", "f4", np.float32):
        assert bufkern.zeros(2, d).dtype == np.float32
    with pytest.raises(bufkern.DtypeError, match="int8"):
        bufkern.zeros(2, "int8")


def test_contexts_from_strings_and_ranges():
    y = bufkern.softmax([[1.0, 2.0]], ctx="cpu")
    assert y.device == "cpu"
    assert bufkern.Context(("cpu", 0)).device == "cpu"
    for bad in ("cpu:4294967296", ("cpu", 2**40), ("cuda", 2**31)):
        with pytest.raises(bufkern.InvalidArgumentError, match="outside"):
            bufkern.Context(bad)
    with pytest.raises(TypeError, match="ctx"):
        bufkern.softmax([1.0], ctx=object())
    b = bufkern.from_numpy([1.0, 2.0])
    assert b.to("cpu") is b
    assert "Buffer([1., 2.], dtype=float64, device='cpu')" == repr(b)


def test_reset_stream_is_a_no_op_on_a_cpu_context():
    with bufkern.Context("cpu") as c:
        c.reset_stream()
        assert c.stream is None
        assert bufkern.softmax([[1.0, 1.0]], ctx=c).tolist() == [[0.5, 0.5]]


def test_help_names_the_classes():
    import inspect
    assert bufkern.Buffer.__module__ == "bufkern"
    assert str(inspect.signature(bufkern.Buffer.copy)).endswith("-> 'Buffer'")
    assert bufkern.softmax.__doc__.count("Raises") == 1 and "Example" in bufkern.softmax.__doc__
