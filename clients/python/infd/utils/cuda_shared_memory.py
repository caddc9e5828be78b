"""CUDA shared memory for Triton's CUDA shared-memory extension, as
tritonclient.utils.cuda_shared_memory has it: allocate device memory, put
numpy arrays in it, read results back, free it. Register the region with
the server through the client (`register_cuda_shared_memory`, with
`get_raw_handle`) and point inputs and outputs at it (`set_shared_memory`).

Built on the CUDA runtime library (libcudart) through ctypes, so it needs a
machine with a GPU and the runtime in the library path; nothing else.
"""

import base64
import ctypes

import numpy as np

from . import raise_error, serialize_byte_tensor, triton_to_np_dtype

__all__ = ["CudaSharedMemoryRegion", "CudaSharedMemoryException", "create_shared_memory_region",
           "get_raw_handle", "set_shared_memory_region", "get_contents_as_numpy",
           "allocated_shared_memory_regions", "destroy_shared_memory_region"]

_HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t)
_H2D, _D2H = 1, 2  # cudaMemcpyKind


class CudaSharedMemoryException(Exception):
    """A CUDA shared memory call failed."""


_lib = None


def _cudart():
    global _lib
    if _lib is None:
        for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
            try:
                _lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if _lib is None:
            raise CudaSharedMemoryException(
                "no CUDA runtime (libcudart.so) in the library path")
        _lib.cudaGetErrorString.restype = ctypes.c_char_p
    return _lib


def _check(rc, what):
    if rc != 0:
        msg = _cudart().cudaGetErrorString(rc).decode(errors="replace")
        raise CudaSharedMemoryException(f"{what}: {msg}")


class _Device:
    """Makes `device_id` current for a call, and the previous one after."""

    def __init__(self, device_id):
        self.device_id = device_id
        self.prev = ctypes.c_int(-1)

    def __enter__(self):
        lib = _cudart()
        if lib.cudaGetDevice(ctypes.byref(self.prev)) != 0:
            self.prev.value = -1
        _check(lib.cudaSetDevice(self.device_id), f"cudaSetDevice({self.device_id})")

    def __exit__(self, *exc):
        if self.prev.value >= 0:
            _cudart().cudaSetDevice(self.prev.value)


class CudaSharedMemoryRegion:
    """A handle: the server-side name, the device memory, its size and GPU."""

    def __init__(self, triton_shm_name, ptr, byte_size, device_id):
        self._triton_shm_name = triton_shm_name
        self._ptr = ptr
        self._byte_size = byte_size
        self._device_id = device_id

    @property
    def name(self):
        return self._triton_shm_name

    @property
    def byte_size(self):
        return self._byte_size

    @property
    def device_id(self):
        return self._device_id

    @property
    def ptr(self):
        """The device address (an int)."""
        return self._ptr


_allocated = {}  # name -> CudaSharedMemoryRegion


def create_shared_memory_region(triton_shm_name, byte_size, device_id):
    """Allocates `byte_size` bytes on GPU `device_id` (cudaMalloc); returns
    the handle."""
    if byte_size <= 0:
        raise CudaSharedMemoryException("byte_size must be at least 1")
    p = ctypes.c_void_p()
    with _Device(device_id):
        _check(_cudart().cudaMalloc(ctypes.byref(p), ctypes.c_size_t(byte_size)),
               f"cudaMalloc of {byte_size} bytes")
    h = CudaSharedMemoryRegion(triton_shm_name, p.value, byte_size, device_id)
    _allocated[triton_shm_name] = h
    return h


def get_raw_handle(cuda_shm_handle):
    """The region's cudaIpcMemHandle_t, base64-encoded (bytes), as the
    clients' register_cuda_shared_memory take it."""
    buf = ctypes.create_string_buffer(_HANDLE_BYTES)
    with _Device(cuda_shm_handle.device_id):
        _check(_cudart().cudaIpcGetMemHandle(buf, ctypes.c_void_p(cuda_shm_handle.ptr)),
               "cudaIpcGetMemHandle")
    return base64.b64encode(buf.raw)


def _copy(cuda_shm_handle, offset, nbytes, host, kind, what):
    if offset < 0 or offset + nbytes > cuda_shm_handle.byte_size:
        raise CudaSharedMemoryException(
            f"{nbytes} bytes at offset {offset} do not fit the region's "
            f"{cuda_shm_handle.byte_size} bytes")
    dev = ctypes.c_void_p(cuda_shm_handle.ptr + offset)
    src, dst = (host, dev) if kind == _H2D else (dev, host)
    with _Device(cuda_shm_handle.device_id):
        _check(_cudart().cudaMemcpy(dst, src, ctypes.c_size_t(nbytes), kind), what)


def set_shared_memory_region(cuda_shm_handle, input_values, offset=0):
    """Copies the numpy arrays one after another into the region from
    `offset` (BYTES arrays in the binary extension's layout)."""
    if not isinstance(input_values, (list, tuple)):
        raise_error("input_values must be a list of numpy arrays")
    at = offset
    for v in input_values:
        if v.dtype == np.object_ or v.dtype.type == np.bytes_:
            s = serialize_byte_tensor(v)
            data = b"" if s is None else s.item()
        else:
            data = np.ascontiguousarray(v).astype(v.dtype.newbyteorder("<"), copy=False).tobytes()
        buf = ctypes.create_string_buffer(data, len(data))
        if data:
            _copy(cuda_shm_handle, at, len(data), buf, _H2D, "cudaMemcpy to the device")
        at += len(data)


def get_contents_as_numpy(cuda_shm_handle, datatype, shape, offset=0):
    """The region's contents from `offset` as an array of `datatype` (a
    numpy dtype or a KServe datatype name, not BYTES) and `shape`."""
    if isinstance(datatype, str):
        if datatype == "BYTES":
            raise CudaSharedMemoryException("BYTES contents are read with the system helpers")
        datatype = triton_to_np_dtype(datatype)
    dtype = np.dtype(datatype).newbyteorder("<")
    out = np.empty(shape, dtype)
    if out.nbytes:
        _copy(cuda_shm_handle, offset, out.nbytes, out.ctypes.data_as(ctypes.c_void_p), _D2H,
              "cudaMemcpy from the device")
    return out


def allocated_shared_memory_regions():
    """The names of the regions this process has allocated and not freed."""
    return list(_allocated)


def destroy_shared_memory_region(cuda_shm_handle):
    """Frees the device memory (unregister it from the server first)."""
    _allocated.pop(cuda_shm_handle.name, None)
    if cuda_shm_handle._ptr:  # noqa: SLF001
        with _Device(cuda_shm_handle.device_id):
            _check(_cudart().cudaFree(ctypes.c_void_p(cuda_shm_handle.ptr)), "cudaFree")
        cuda_shm_handle._ptr = 0  # noqa: SLF001
