"""bufkern: Python binding over libbufkern (ctypes + DLPack), numpy-style.

    import numpy as np, bufkern
    y = bufkern.softmax([[1.0, 2.0], [3.0, 4.0]], axis=-1)   # a (2, 2) float64 Buffer
    np.asarray(y)                                             # back to numpy
    out, normalized, inv_std = bufkern.layernorm_forward(x, gamma, beta, 1e-5)
    c = bufkern.bmm(a, b, transpose_b=True)                  # 2-D or 3-D operands

Primitives take arrays with shapes (Buffers, numpy arrays, torch tensors,
DLPack and buffer-protocol objects, lists) and infer their geometry; the C
geometry stays available as keywords (``dims=``, ``rows=``, ``cols=``...),
checked against the shapes. Results are immutable Buffers with a shape that
exchange memory through DLPack: ``torch.from_dlpack(buf)``,
``numpy.from_dlpack(buf)`` and ``bufkern.from_dlpack(tensor)``. The C library
is found through ``BUFKERN_LIBRARY``, a copy in this package's directory, the
repository's ``build/`` directory, or the system search path (see
``bufkern._ffi.candidate_paths``).
"""

from ._core import (
    F32,
    F64,
    Buffer,
    Context,
    as_buffer,
    from_dlpack,
    from_numpy,
    zeros,
)
from ._ffi import (
    STATUS_NAMES,
    DeviceError,
    DeviceMismatchError,
    DtypeError,
    Error,
    InternalError,
    InvalidArgumentError,
    LibraryNotFoundError,
    NoDeviceError,
    NullError,
    OutOfMemoryError,
    UnsupportedError,
    library_path,
)
from ._ops import (
    bmm,
    bmm_scaled,
    broadcast_col,
    broadcast_to,
    broadcast_to_adjoint,
    conv,
    irfft,
    irfft_unnormalized,
    layernorm_backward,
    layernorm_forward,
    rfft,
    rows_first_max_mask,
    rows_gather,
    rows_masked_softmax,
    rows_max,
    rows_scatter_add,
    rows_sum,
    rows_topk_mask,
    scan_diag,
    scan_diag_backward,
    scan_diag_var,
    scan_diag_var_backward,
    softmax,
    sum_axis,
    swap_adjacent,
    vec_concat,
    vec_slice,
    xent_teacher,
    xent_weighted_mean,
)

# The public classes read as bufkern.Buffer and bufkern.Context in help(),
# reprs and tracebacks, and their annotations name them.
for _cls in (Buffer, Context):
    _cls.__module__ = "bufkern"
del _cls

__version__ = "0.1.0"


def version() -> str:
    """The C library's version, "MAJOR.MINOR.PATCH"."""
    from ._ffi import load

    return load().bk_version().decode()


def build_info() -> dict:
    """The C library's build facts as a dict ("backends": "cpu cuda", ...)."""
    from ._ffi import load

    text = load().bk_build_info().decode()
    info = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info[key.strip()] = value.strip()
    return info


def cuda_device_count() -> int:
    """Number of CUDA devices visible to the library (0 without CUDA)."""
    from ._ffi import load

    return int(load().bk_cuda_device_count())


def status_string(status: int) -> str:
    """The library's short text for a status code."""
    from ._ffi import load

    return load().bk_status_string(int(status)).decode()


def last_error() -> str:
    """The calling thread's bk_last_error() text."""
    from ._ffi import last_error_text

    return last_error_text()


PRIMITIVES = (
    "softmax",
    "xent_weighted_mean",
    "xent_teacher",
    "conv",
    "rows_sum",
    "rows_max",
    "rows_first_max_mask",
    "rows_topk_mask",
    "rows_masked_softmax",
    "vec_concat",
    "vec_slice",
    "broadcast_col",
    "broadcast_to",
    "broadcast_to_adjoint",
    "swap_adjacent",
    "sum_axis",
    "layernorm_forward",
    "layernorm_backward",
    "bmm",
    "bmm_scaled",
    "rfft",
    "irfft",
    "irfft_unnormalized",
    "scan_diag",
    "scan_diag_backward",
    "scan_diag_var",
    "scan_diag_var_backward",
    "rows_gather",
    "rows_scatter_add",
)

__all__ = [
    "Buffer",
    "Context",
    "F32",
    "F64",
    "Error",
    "InvalidArgumentError",
    "DtypeError",
    "DeviceMismatchError",
    "NullError",
    "UnsupportedError",
    "OutOfMemoryError",
    "NoDeviceError",
    "DeviceError",
    "InternalError",
    "LibraryNotFoundError",
    "STATUS_NAMES",
    "as_buffer",
    "from_dlpack",
    "from_numpy",
    "zeros",
    "version",
    "build_info",
    "cuda_device_count",
    "status_string",
    "last_error",
    "library_path",
    *PRIMITIVES,
]
