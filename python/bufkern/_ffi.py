"""Loading libbufkern.so, the C prototypes, DLPack structs and the error classes.

Everything that touches ctypes declarations lives here so that the rest of the
binding reads as plain Python. The library is loaded lazily, on first use, so
that ``import bufkern`` works (and can report where it looked) even when the
shared library is missing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    PYFUNCTYPE,
    Structure,
    c_char_p,
    c_double,
    c_int,
    c_int32,
    c_int64,
    c_uint8,
    c_uint16,
    c_uint64,
    c_void_p,
)
from pathlib import Path

# ---------------------------------------------------------------------------
# Status codes and error classes
# ---------------------------------------------------------------------------

OK = 0
ERR_INVALID_ARGUMENT = 100
ERR_DTYPE = 101
ERR_DEVICE_MISMATCH = 102
ERR_NULL = 103
ERR_UNSUPPORTED = 200
ERR_OUT_OF_MEMORY = 300
ERR_NO_DEVICE = 301
ERR_DEVICE = 400
ERR_INTERNAL = 900

STATUS_NAMES = {
    OK: "BK_OK",
    ERR_INVALID_ARGUMENT: "BK_ERR_INVALID_ARGUMENT",
    ERR_DTYPE: "BK_ERR_DTYPE",
    ERR_DEVICE_MISMATCH: "BK_ERR_DEVICE_MISMATCH",
    ERR_NULL: "BK_ERR_NULL",
    ERR_UNSUPPORTED: "BK_ERR_UNSUPPORTED",
    ERR_OUT_OF_MEMORY: "BK_ERR_OUT_OF_MEMORY",
    ERR_NO_DEVICE: "BK_ERR_NO_DEVICE",
    ERR_DEVICE: "BK_ERR_DEVICE",
    ERR_INTERNAL: "BK_ERR_INTERNAL",
}


class Error(Exception):
    """A bufkern call failed.

    ``status`` is the numeric bk_status, ``name`` its enum name
    ("BK_ERR_INVALID_ARGUMENT"), ``message`` the library's bk_last_error()
    text (or the binding's own text for checks made in Python before the call).
    """

    def __init__(self, status: int, message: str):
        self.status = int(status)
        self.name = STATUS_NAMES.get(self.status, f"status {self.status}")
        self.message = message
        super().__init__(status, message)

    def __str__(self) -> str:
        return f"{self.message} [{self.name}]"


class InvalidArgumentError(Error, ValueError):
    """BK_ERR_INVALID_ARGUMENT (100): a size, axis, flag or length is wrong."""


class DtypeError(Error, TypeError):
    """BK_ERR_DTYPE (101): mixed or unsupported dtypes."""


class DeviceMismatchError(Error, ValueError):
    """BK_ERR_DEVICE_MISMATCH (102): inputs and context on different devices."""


class NullError(Error, ValueError):
    """BK_ERR_NULL (103): a required pointer was NULL."""


class UnsupportedError(Error):
    """BK_ERR_UNSUPPORTED (200): e.g. a CUDA device in a build without CUDA."""


class OutOfMemoryError(Error, MemoryError):
    """BK_ERR_OUT_OF_MEMORY (300)."""


class NoDeviceError(Error):
    """BK_ERR_NO_DEVICE (301): a CUDA index with no GPU behind it."""


class DeviceError(Error):
    """BK_ERR_DEVICE (400): a CUDA or library failure."""


class InternalError(Error):
    """BK_ERR_INTERNAL (900) and any status this binding does not know."""


ERROR_CLASSES = {
    ERR_INVALID_ARGUMENT: InvalidArgumentError,
    ERR_DTYPE: DtypeError,
    ERR_DEVICE_MISMATCH: DeviceMismatchError,
    ERR_NULL: NullError,
    ERR_UNSUPPORTED: UnsupportedError,
    ERR_OUT_OF_MEMORY: OutOfMemoryError,
    ERR_NO_DEVICE: NoDeviceError,
    ERR_DEVICE: DeviceError,
    ERR_INTERNAL: InternalError,
}


def make_error(status: int, message: str) -> Error:
    return ERROR_CLASSES.get(int(status), InternalError)(status, message)


class LibraryNotFoundError(OSError):
    """libbufkern could not be found or loaded; the message lists where we looked."""


# ---------------------------------------------------------------------------
# DLPack and bufkern structs
# ---------------------------------------------------------------------------

DL_CPU = 1
DL_CUDA = 2
DL_FLOAT = 2


class BkDevice(Structure):
    _fields_ = [("kind", c_int), ("index", c_int32)]


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", DLDevice),
        ("ndim", c_int32),
        ("dtype", DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


# The deleter takes the managed tensor's own address; declaring it with a
# void pointer avoids a recursive structure definition.
DLDeleter = CFUNCTYPE(None, c_void_p)


class DLManagedTensor(Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", c_void_p),
        ("deleter", DLDeleter),
    ]


class DLPackVersion(Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


# DLPack 1.0's managed tensor: a version, then the flags that say, among
# other things, whether the consumer may write into the memory.
class DLManagedTensorVersioned(Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", c_void_p),
        ("deleter", DLDeleter),
        ("flags", c_uint64),
        ("dl_tensor", DLTensor),
    ]


DLPACK_VERSION = (1, 0)
DLPACK_FLAG_READ_ONLY = 1

# DLPack type codes, for the names in messages.
DL_TYPE_CODES = {0: "int", 1: "uint", 2: "float", 3: "opaque", 4: "bfloat", 5: "complex", 6: "bool"}


def dl_dtype_name(code: int, bits: int, lanes: int) -> str:
    """numpy's name for a DLPack dtype ("float16", "int64", "bool"), with the
    lane count when it is not 1."""
    kind = DL_TYPE_CODES.get(int(code), f"code{int(code)}_")
    name = "bool" if kind == "bool" else f"{kind}{int(bits)}"
    return name if int(lanes) == 1 else f"{name}x{int(lanes)}"


# ---------------------------------------------------------------------------
# Prototypes
# ---------------------------------------------------------------------------

_P = c_void_p  # bk_buffer * / bk_context *
_OUT = POINTER(c_void_p)  # bk_buffer **
_DIMS = POINTER(c_int64)  # const int64_t *
_IDX = POINTER(c_uint64)  # const uint64_t *
_ST = c_int  # bk_status

# name: (restype, argtypes)
PROTOTYPES = {
    "bk_version": (c_char_p, []),
    "bk_status_string": (c_char_p, [c_int]),
    "bk_last_error": (c_char_p, []),
    "bk_build_info": (c_char_p, []),
    "bk_context_create": (_ST, [BkDevice, _OUT]),
    "bk_context_destroy": (None, [_P]),
    "bk_context_set_stream": (_ST, [_P, c_void_p]),
    "bk_context_synchronize": (_ST, [_P]),
    "bk_context_device": (BkDevice, [_P]),
    "bk_cuda_device_count": (c_int, []),
    "bk_buffer_zeros": (_ST, [_P, c_int, c_int64, _OUT]),
    "bk_buffer_from_host": (_ST, [_P, c_int, c_void_p, c_int64, _OUT]),
    "bk_buffer_to_host": (_ST, [_P, _P, c_void_p, c_int64]),
    "bk_buffer_copy": (_ST, [_P, _P, _OUT]),
    "bk_buffer_retain": (c_void_p, [_P]),
    "bk_buffer_release": (None, [_P]),
    "bk_buffer_dtype": (c_int, [_P]),
    "bk_buffer_length": (c_int64, [_P]),
    "bk_buffer_device": (BkDevice, [_P]),
    "bk_buffer_data": (c_void_p, [_P]),
    "bk_buffer_from_dlpack": (_ST, [_P, c_void_p, _OUT]),
    "bk_buffer_to_dlpack": (_ST, [_P, _OUT]),
    "bk_softmax": (_ST, [_P, _P, _DIMS, c_int, c_int, _OUT]),
    "bk_xent_weighted_mean": (_ST, [_P, _P, _P, c_int64, c_int64, _OUT]),
    "bk_xent_teacher": (_ST, [_P, _P, _P, c_int64, c_int64, c_int, _OUT]),
    "bk_conv": (
        _ST,
        [_P, _P, _P, _P, _DIMS, c_int, _DIMS, c_int, _DIMS, _DIMS, _DIMS, _DIMS, c_int64, _OUT],
    ),
    "bk_rows_sum": (_ST, [_P, _P, c_int64, c_int64, _OUT]),
    "bk_rows_max": (_ST, [_P, _P, c_int64, c_int64, _OUT]),
    "bk_rows_first_max_mask": (_ST, [_P, _P, c_int64, c_int64, _OUT]),
    "bk_rows_topk_mask": (_ST, [_P, _P, c_int64, c_int64, c_int64, _OUT]),
    "bk_rows_masked_softmax": (_ST, [_P, _P, _P, c_int64, c_int64, _OUT]),
    "bk_vec_concat": (_ST, [_P, _P, _P, c_int64, c_int64, _OUT]),
    "bk_vec_slice": (_ST, [_P, _P, c_int64, c_int64, c_int64, _OUT]),
    "bk_broadcast_col": (_ST, [_P, _P, c_int64, c_int64, _OUT]),
    "bk_broadcast_to": (_ST, [_P, _P, _DIMS, c_int, _DIMS, c_int, _DIMS, _OUT]),
    "bk_broadcast_to_adjoint": (_ST, [_P, _P, _DIMS, c_int, _DIMS, c_int, _DIMS, _OUT]),
    "bk_swap_adjacent": (_ST, [_P, _P, _DIMS, c_int, c_int, _OUT]),
    "bk_sum_axis": (_ST, [_P, _P, _DIMS, c_int, c_int, _OUT]),
    "bk_layernorm_forward": (
        _ST,
        [_P, _P, _P, _P, c_int64, c_int64, c_double, _OUT, _OUT, _OUT],
    ),
    "bk_layernorm_backward": (
        _ST,
        [_P, _P, _P, _P, _P, c_int64, c_int64, _OUT, _OUT, _OUT],
    ),
    "bk_bmm": (_ST, [_P, _P, _P, c_int64, c_int64, c_int64, c_int64, c_int, c_int, _OUT]),
    "bk_bmm_scaled": (
        _ST,
        [_P, _P, _P, c_int64, c_int64, c_int64, c_int64, c_int, c_int, c_double, _OUT,
         POINTER(c_int)],
    ),
    "bk_rfft": (_ST, [_P, _P, c_int64, c_int64, _OUT]),
    "bk_irfft": (_ST, [_P, _P, c_int64, c_int64, _OUT]),
    "bk_irfft_unnormalized": (_ST, [_P, _P, c_int64, c_int64, _OUT]),
    "bk_scan_diag": (_ST, [_P, _P, _P, _P, _P, c_int64, c_int64, _OUT]),
    "bk_scan_diag_backward": (
        _ST,
        [_P, _P, _P, _P, _P, _P, _P, c_int64, c_int64, _OUT, _OUT, _OUT, _OUT],
    ),
    "bk_scan_diag_var": (_ST, [_P, _P, _P, _P, _P, c_int64, c_int64, _OUT]),
    "bk_scan_diag_var_backward": (
        _ST,
        [_P, _P, _P, _P, _P, _P, _P, c_int64, c_int64, _OUT, _OUT, _OUT, _OUT],
    ),
    "bk_rows_gather": (_ST, [_P, _P, c_int64, c_int64, _IDX, c_int64, _OUT]),
    "bk_rows_scatter_add": (_ST, [_P, _P, _P, c_int64, c_int64, _IDX, c_int64, _OUT]),
}

# ---------------------------------------------------------------------------
# Library discovery
# ---------------------------------------------------------------------------

_PACKAGE_DIR = Path(__file__).resolve().parent
_LIB_NAMES = ("libbufkern.so", "libbufkern.dylib", "bufkern.dll")


def _package_dirs():
    """The package's directories: where this file is, then any other entry of the
    package's ``__path__`` (an editable install serves the sources from the checkout
    and the built library from site-packages)."""
    dirs = [_PACKAGE_DIR]
    package = sys.modules.get(__package__ or "")
    for entry in getattr(package, "__path__", ()):
        path = Path(entry).resolve()
        if path not in dirs:
            dirs.append(path)
    return dirs


def candidate_paths():
    """Where the library is looked for, in order, as (origin, path) pairs.

    1. ``BUFKERN_LIBRARY`` (a path to the shared library): when set, it is the
       only candidate, so a wrong value is reported instead of silently
       replaced by another copy.
    2. The package directory, where ``pip install ./python`` puts the library
       it builds (``bufkern/libbufkern.so``).
    3. ``build/libbufkern.so`` of the repository, only when the package is the
       one inside a checkout (``python/bufkern`` next to ``include/bufkern.h``)
       and is used from there, e.g. with ``PYTHONPATH=python`` after
       ``make build``.
    4. ``ctypes.util.find_library("bufkern")``: a library installed into the
       system's search path (``cmake --install``).
    """
    env = os.environ.get("BUFKERN_LIBRARY")
    if env:
        return [("BUFKERN_LIBRARY", env)]
    found = []
    for directory in _package_dirs():
        for name in _LIB_NAMES:
            found.append(("package directory", str(directory / name)))
    checkout = _PACKAGE_DIR.parent.parent
    if (checkout / "include" / "bufkern.h").is_file():
        for name in _LIB_NAMES:
            found.append(("repository build directory", str(checkout / "build" / name)))
    system = ctypes.util.find_library("bufkern")
    found.append(("ctypes.util.find_library('bufkern')", system))
    return found


_lock = threading.Lock()
_lib = None
_lib_path = None


def _declare(lib):
    missing = []
    for name, (restype, argtypes) in PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    return missing


def load():
    """The loaded library (ctypes.CDLL), loading it on first call."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        explicit = "BUFKERN_LIBRARY" in os.environ and os.environ["BUFKERN_LIBRARY"] != ""
        for origin, path in candidate_paths():
            if path is None:
                tried.append(f"  {origin}: not found")
                continue
            if origin != "ctypes.util.find_library('bufkern')" and not os.path.exists(path):
                tried.append(f"  {origin}: {path} (no such file)")
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as exc:
                tried.append(f"  {origin}: {path} ({exc})")
                continue
            missing = _declare(lib)
            if missing:
                tried.append(
                    f"  {origin}: {path} (lacks {', '.join(missing[:4])}"
                    f"{' ...' if len(missing) > 4 else ''}; an older build?)"
                )
                continue
            _lib, _lib_path = lib, path
            return _lib
        hint = (
            "`pip install ./python` from the repository builds the library into "
            "the package; to use another copy, set BUFKERN_LIBRARY to its path "
            "(e.g. BUFKERN_LIBRARY=$PWD/build/libbufkern.so after `make build`)."
        )
        if explicit:
            hint = "BUFKERN_LIBRARY is set, so no other location was tried."
        raise LibraryNotFoundError(
            "bufkern: cannot load the C library libbufkern.\nTried:\n"
            + "\n".join(tried)
            + "\n"
            + hint
        )


def optional_symbol(name: str, restype, argtypes):
    """The library's function `name` with its prototype, or None when the
    loaded library predates it (symbols added after a release are looked up
    on first use, so that the binding keeps working with an older library)."""
    try:
        fn = getattr(load(), name)
    except AttributeError:
        return None
    fn.restype, fn.argtypes = restype, argtypes
    return fn


def library_path():
    """The path the library was loaded from (loading it if needed)."""
    load()
    return _lib_path


def last_error_text() -> str:
    raw = load().bk_last_error()
    return raw.decode("utf-8", "replace") if raw else ""


def check(status: int) -> None:
    """Raise the Error subclass for a failed status with bk_last_error's text."""
    if status != 0:
        raise make_error(status, last_error_text())


# ---------------------------------------------------------------------------
# Python C API pieces for DLPack capsules
# ---------------------------------------------------------------------------

# Fresh foreign-function objects (not the shared ctypes.pythonapi attributes),
# so that argtypes set by other libraries on ctypes.pythonapi never interfere.
# PYFUNCTYPE keeps the GIL held during the call, as the C API requires.
PyCapsule_Destructor = CFUNCTYPE(None, c_void_p)
PyCapsule_New = PYFUNCTYPE(ctypes.py_object, c_void_p, c_void_p, PyCapsule_Destructor)(
    ("PyCapsule_New", ctypes.pythonapi)
)
PyCapsule_IsValid = PYFUNCTYPE(c_int, c_void_p, c_void_p)(("PyCapsule_IsValid", ctypes.pythonapi))
PyCapsule_GetPointer = PYFUNCTYPE(c_void_p, ctypes.py_object, c_void_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
PyCapsule_GetPointerRaw = PYFUNCTYPE(c_void_p, c_void_p, c_void_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
PyCapsule_SetName = PYFUNCTYPE(c_int, ctypes.py_object, c_void_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)
PyCapsule_IsValidObj = PYFUNCTYPE(c_int, ctypes.py_object, c_void_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_Py_IncRef = PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", ctypes.pythonapi))


def immortal(obj):
    """Keep obj alive until the process ends.

    Capsule names are stored by pointer (not copied) and a capsule may be
    destroyed during interpreter shutdown, after this module's globals are
    gone; the names and the destructor thunk must therefore never be freed.
    """
    _Py_IncRef(obj)
    return obj


NAME_DLTENSOR = immortal(ctypes.create_string_buffer(b"dltensor"))
NAME_USED = immortal(ctypes.create_string_buffer(b"used_dltensor"))
NAME_VERSIONED = immortal(ctypes.create_string_buffer(b"dltensor_versioned"))
ADDR_DLTENSOR = ctypes.addressof(NAME_DLTENSOR)
ADDR_USED = ctypes.addressof(NAME_USED)
ADDR_VERSIONED = ctypes.addressof(NAME_VERSIONED)


def _release_unconsumed(capsule_addr):
    # A consumer that took the tensor renamed the capsule ("used_dltensor",
    # "used_dltensor_versioned") and owns it now; only an unconsumed capsule
    # still owns the tensor.
    for name, struct in ((ADDR_DLTENSOR, DLManagedTensor), (ADDR_VERSIONED, DLManagedTensorVersioned)):
        if PyCapsule_IsValid(capsule_addr, name):
            ptr = PyCapsule_GetPointerRaw(capsule_addr, name)
            if ptr:
                managed = struct.from_address(ptr)
                if managed.deleter:
                    managed.deleter(ptr)
            return


def _capsule_destructor(capsule_addr):
    try:
        PyCapsule_IsValid(capsule_addr, ADDR_DLTENSOR)
    except BaseException:
        # The capsule is destroyed while an exception is set: a consumer
        # failed after taking it. ctypes surfaced that exception at the first
        # C API call (which has no side effect) and it is now cleared, so the
        # tensor can be released. A ctypes callback cannot set the exception
        # again: re-raising reports it as unraisable (printed with its
        # traceback) and the consumer's call ends in a SystemError.
        _release_unconsumed(capsule_addr)
        raise
    _release_unconsumed(capsule_addr)


CAPSULE_DESTRUCTOR = immortal(PyCapsule_Destructor(_capsule_destructor))


def new_capsule(managed_addr: int, versioned: bool = False):
    """A "dltensor" capsule owning the DLManagedTensor at managed_addr, or with
    `versioned` a "dltensor_versioned" one owning a DLManagedTensorVersioned."""
    return PyCapsule_New(managed_addr, ADDR_VERSIONED if versioned else ADDR_DLTENSOR, CAPSULE_DESTRUCTOR)


def is_capsule(obj) -> bool:
    return type(obj).__name__ == "PyCapsule"


NAME_USED_VERSIONED = immortal(ctypes.create_string_buffer(b"used_dltensor_versioned"))
ADDR_USED_VERSIONED = ctypes.addressof(NAME_USED_VERSIONED)


def capsule_pointer(capsule):
    """(address, versioned) of the managed tensor of an unconsumed capsule:
    a DLManagedTensor ("dltensor") or a DLManagedTensorVersioned
    ("dltensor_versioned")."""
    if PyCapsule_IsValidObj(capsule, ADDR_DLTENSOR):
        return PyCapsule_GetPointer(capsule, ADDR_DLTENSOR), False
    if PyCapsule_IsValidObj(capsule, ADDR_VERSIONED):
        return PyCapsule_GetPointer(capsule, ADDR_VERSIONED), True
    if PyCapsule_IsValidObj(capsule, ADDR_USED) or PyCapsule_IsValidObj(capsule, ADDR_USED_VERSIONED):
        raise BufferError("bufkern.from_dlpack: the DLPack capsule was already consumed")
    raise BufferError("bufkern.from_dlpack: the object is not a DLPack capsule")


def mark_consumed(capsule, versioned: bool = False) -> None:
    """Rename the capsule so that its destructor leaves the tensor alone."""
    PyCapsule_SetName(capsule, ADDR_USED_VERSIONED if versioned else ADDR_USED)
