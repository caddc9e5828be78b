"""System shared memory for Triton's shared-memory extension, as
tritonclient.utils.shared_memory has it: make a POSIX shared memory object,
put numpy arrays in it, read results back, destroy it. Register the region
with the server through the client (`register_system_shared_memory`) and
point inputs and outputs at it (`set_shared_memory`).

Built on Python's multiprocessing.shared_memory (POSIX shm_open). A key is
the object's name as shm_open takes it: "/" and then a name without "/".
"""

from multiprocessing import resource_tracker
from multiprocessing import shared_memory as _mp

import numpy as np

from . import raise_error, serialize_byte_tensor, triton_to_np_dtype

__all__ = ["SharedMemoryRegion", "SharedMemoryException", "create_shared_memory_region",
           "set_shared_memory_region", "get_contents_as_numpy",
           "mapped_shared_memory_regions", "destroy_shared_memory_region"]


class SharedMemoryException(Exception):
    """A shared memory call failed."""


class SharedMemoryRegion:
    """A handle: the server-side name, the key, the mapping."""

    def __init__(self, triton_shm_name, shm_key, shm, created):
        self._triton_shm_name = triton_shm_name
        self._shm_key = shm_key
        self._shm = shm
        self._created = created

    @property
    def name(self):
        return self._triton_shm_name

    @property
    def key(self):
        return self._shm_key

    @property
    def byte_size(self):
        return self._shm.size

    @property
    def buf(self):
        return self._shm.buf


_mapped = {}  # key -> SharedMemoryRegion


def _check_key(shm_key):
    if not isinstance(shm_key, str) or len(shm_key) < 2 or shm_key[0] != "/" or \
            "/" in shm_key[1:]:
        raise SharedMemoryException(
            f"shared memory key {shm_key!r}: '/' and then a name without '/'")


def create_shared_memory_region(triton_shm_name, shm_key, byte_size, create_only=False):
    """Creates (or, unless create_only, opens) the object `shm_key` of at
    least `byte_size` bytes and maps it; returns the handle."""
    _check_key(shm_key)
    if byte_size <= 0:
        raise SharedMemoryException("byte_size must be at least 1")
    name = shm_key[1:]
    try:
        shm = _mp.SharedMemory(name=name, create=True, size=byte_size)
        created = True
    except FileExistsError:
        if create_only:
            raise SharedMemoryException(f"shared memory object {shm_key} exists already")
        shm = _mp.SharedMemory(name=name, create=False)
        created = False
        if shm.size < byte_size:
            shm.close()
            raise SharedMemoryException(
                f"shared memory object {shm_key} holds {shm.size} bytes, not {byte_size}")
    # The handle decides when the object goes (destroy_shared_memory_region),
    # not Python's resource tracker at interpreter exit.
    try:
        resource_tracker.unregister(shm._name, "shared_memory")  # noqa: SLF001
    except Exception:  # noqa: BLE001 - the tracker is an implementation detail
        pass
    h = SharedMemoryRegion(triton_shm_name, shm_key, shm, created)
    _mapped[shm_key] = h
    return h


def set_shared_memory_region(shm_handle, input_values, offset=0):
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
        if at + len(data) > shm_handle.byte_size:
            raise SharedMemoryException(
                f"{len(data)} bytes at offset {at} do not fit the region's "
                f"{shm_handle.byte_size} bytes")
        shm_handle.buf[at:at + len(data)] = data
        at += len(data)


def get_contents_as_numpy(shm_handle, datatype, shape, offset=0):
    """The region's contents from `offset` as an array of `datatype` (a
    numpy dtype or a KServe datatype name) and `shape` (a copy)."""
    if isinstance(datatype, str):
        if datatype == "BYTES":
            datatype = np.object_
        else:
            datatype = triton_to_np_dtype(datatype)
    dtype = np.dtype(datatype)
    count = int(np.prod(shape)) if len(shape) else 1
    if dtype == np.object_:
        # `count` elements, each a 4-byte little-endian length and its bytes.
        at, out = offset, []
        for _ in range(count):
            if at + 4 > shm_handle.byte_size:
                raise SharedMemoryException("a BYTES element runs past the region's end")
            n = int.from_bytes(shm_handle.buf[at:at + 4], "little")
            if at + 4 + n > shm_handle.byte_size:
                raise SharedMemoryException("a BYTES element runs past the region's end")
            out.append(bytes(shm_handle.buf[at + 4:at + 4 + n]))
            at += 4 + n
        return np.array(out, dtype=np.object_).reshape(shape)
    nbytes = count * dtype.itemsize
    if offset + nbytes > shm_handle.byte_size:
        raise SharedMemoryException(
            f"{nbytes} bytes at offset {offset} do not fit the region's "
            f"{shm_handle.byte_size} bytes")
    return np.frombuffer(shm_handle.buf, dtype.newbyteorder("<"), count, offset).reshape(
        shape).copy()


def mapped_shared_memory_regions():
    """The keys of the regions this process has mapped and not destroyed."""
    return list(_mapped)


def destroy_shared_memory_region(shm_handle):
    """Unmaps the region and removes the object (unregister it from the
    server first)."""
    _mapped.pop(shm_handle.key, None)
    shm_handle._shm.close()  # noqa: SLF001
    try:
        shm_handle._shm.unlink()  # noqa: SLF001
    except FileNotFoundError:
        pass
