"""Helpers shared by the infd clients, named as tritonclient.utils names them:
datatype conversion, BYTES tensor (de)serialization, the client exception."""

import struct

import numpy as np

__all__ = ["InferenceServerException", "np_to_triton_dtype", "triton_to_np_dtype",
           "serialize_byte_tensor", "deserialize_bytes_tensor", "raise_error"]


class InferenceServerException(Exception):
    """An error from the server or the client: `message()`, `status()` (the
    protocol's status, e.g. "400" or "StatusCode.INVALID_ARGUMENT") and
    `debug_details()`."""

    def __init__(self, msg, status=None, debug_details=None):
        super().__init__(msg)
        self._msg = msg
        self._status = status
        self._debug_details = debug_details

    def __str__(self):
        return self._msg if self._status is None else f"[{self._status}] {self._msg}"

    def message(self):
        return self._msg

    def status(self):
        return self._status

    def debug_details(self):
        return self._debug_details


def raise_error(msg):
    raise InferenceServerException(msg=msg) from None


_NP_TO_TRITON = {
    np.dtype(np.bool_): "BOOL", np.dtype(np.int8): "INT8", np.dtype(np.int16): "INT16",
    np.dtype(np.int32): "INT32", np.dtype(np.int64): "INT64", np.dtype(np.uint8): "UINT8",
    np.dtype(np.uint16): "UINT16", np.dtype(np.uint32): "UINT32", np.dtype(np.uint64): "UINT64",
    np.dtype(np.float16): "FP16", np.dtype(np.float32): "FP32", np.dtype(np.float64): "FP64",
}
_TRITON_TO_NP = {v: k.type for k, v in _NP_TO_TRITON.items()}
_TRITON_TO_NP["BYTES"] = np.object_


def np_to_triton_dtype(np_dtype):
    """"FP32" for np.float32, "BYTES" for object or bytes arrays; None if
    KServe has no such datatype."""
    dt = np.dtype(np_dtype)
    if dt == np.object_ or dt.type == np.bytes_:
        return "BYTES"
    return _NP_TO_TRITON.get(dt)


def triton_to_np_dtype(dtype):
    """np.float32 for "FP32", np.object_ for "BYTES"; None for BF16 (numpy
    has no such type) and unknown names."""
    return _TRITON_TO_NP.get(dtype)


def serialize_byte_tensor(input_tensor):
    """A BYTES tensor (numpy object or bytes array of bytes/str elements) in
    KServe's binary layout: per element, in C order, a 4-byte little-endian
    length and the bytes. Returns a 0-d np.object_ array holding them (as
    tritonclient does), or None for an empty tensor."""
    if input_tensor.size == 0:
        return None
    parts = []
    for obj in np.nditer(input_tensor, flags=["refs_ok"], order="C"):
        item = obj.item()
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, (bytes, bytearray)):
            item = str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(item)))
        parts.append(bytes(item))
    return np.asarray(b"".join(parts), dtype=np.object_)


def deserialize_bytes_tensor(encoded_tensor):
    """The elements of a KServe BYTES buffer as a 1-D np.object_ array of
    bytes."""
    buf = bytes(encoded_tensor)
    out = []
    off = 0
    while off < len(buf):
        if off + 4 > len(buf):
            raise_error(f"BYTES data: a length prefix is cut off at byte {off}")
        (n,) = struct.unpack_from("<I", buf, off)
        off += 4
        if off + n > len(buf):
            raise_error(f"BYTES data: an element of {n} bytes runs past the end at byte {off}")
        out.append(buf[off:off + n])
        off += n
    return np.array(out, dtype=np.object_)
