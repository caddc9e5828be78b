"""infd's raw socket protocol (docs/RAW_PROTOCOL.md): tensors as bytes over a
Unix or TCP socket, no HTTP or JSON.

    from infd.raw import RawClient
    with RawClient(unix="/tmp/infd/add_sub.framed.sock") as c:
        out = c.infer({"INPUT0": a, "INPUT1": b})       # {"OUTPUT0": array, ...}

    from infd.raw import HeaderlessClient                 # the trt-daemon protocol
    with HeaderlessClient(unix="/tmp/infd/model.sock") as c:
        raw = c.infer(x, output_bytes=4000)              # the outputs' bytes, concatenated
"""

import socket
import struct

import numpy as np

from infd.utils import (InferenceServerException, deserialize_bytes_tensor, np_to_triton_dtype,
                        raise_error, serialize_byte_tensor, triton_to_np_dtype)

__all__ = ["RawClient", "HeaderlessClient", "InferenceServerException"]

MAGIC = b"INFD"
HEADER = struct.Struct("<4sBBHQHHIQ")  # 32 bytes
CODES = {"BOOL": 1, "UINT8": 2, "UINT16": 3, "UINT32": 4, "UINT64": 5, "INT8": 6, "INT16": 7,
         "INT32": 8, "INT64": 9, "FP16": 10, "BF16": 11, "FP32": 12, "FP64": 13, "BYTES": 14}
NAMES = {v: k for k, v in CODES.items()}
STATUS = {1: "INVALID_ARGUMENT", 2: "NOT_FOUND", 3: "UNAVAILABLE", 4: "RESOURCE_EXHAUSTED",
          5: "DEADLINE_EXCEEDED", 6: "UNIMPLEMENTED", 7: "OUT_OF_MEMORY", 8: "IO", 9: "INTERNAL"}


def _connect(unix, host, port, timeout):
    if unix:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        addr = str(unix)
    elif host and port:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        addr = (host, int(port))
    else:
        raise_error("give unix=PATH, or host= and port=")
    s.settimeout(timeout)
    try:
        s.connect(addr)
    except OSError as e:
        s.close()
        raise InferenceServerException(f"cannot connect to {addr}: {e}") from None
    if not unix:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _recv_exact(s, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = s.recv_into(view[got:])
        if k == 0:
            raise InferenceServerException("the server closed the connection")
        got += k
    return bytes(buf)


def _datatype(arr):
    dt = np_to_triton_dtype(arr.dtype)
    if dt is None:
        raise_error(f"numpy dtype {arr.dtype} has no raw protocol datatype")
    return dt


class _Socket:
    def __init__(self, unix=None, host=None, port=None, timeout=60.0):
        self._s = _connect(unix, host, port, timeout)

    def close(self):
        self._s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class RawClient(_Socket):
    """Framed mode: any model, several inputs, any batch, error answers."""

    def __init__(self, unix=None, host=None, port=None, timeout=60.0):
        super().__init__(unix, host, port, timeout)
        self._next_id = 1

    def infer(self, inputs, outputs=None, request_id=None):
        """inputs: {name: numpy array} (full shapes, batch dim first when the
        model batches); outputs: names to return (default all). Returns
        {name: numpy array}; raises InferenceServerException with the
        server's status and message."""
        if request_id is None:
            request_id = self._next_id
            self._next_id += 1
        desc = bytearray()
        datas = []
        for name, arr in inputs.items():
            arr = np.asarray(arr)
            dt = _datatype(arr)
            if dt == "BYTES":
                s = serialize_byte_tensor(arr)
                data = b"" if s is None else s.item()
            else:
                data = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"),
                                                        copy=False).tobytes()
            nb = name.encode()
            desc += struct.pack("<B", len(nb)) + nb + struct.pack("<BB", CODES[dt], arr.ndim)
            desc += struct.pack(f"<{arr.ndim}q", *arr.shape) + struct.pack("<Q", len(data))
            datas.append(data)
        for name in outputs or []:
            nb = name.encode()
            desc += struct.pack("<B", len(nb)) + nb
        data_bytes = sum(len(d) for d in datas)
        head = HEADER.pack(MAGIC, 1, 0, 0, request_id, len(inputs), len(outputs or []),
                           len(desc), data_bytes)
        self._s.sendall(b"".join([head, bytes(desc)] + datas))
        magic, _, flags, status, rid, n_out, msg_bytes, desc_bytes, data_bytes = HEADER.unpack(
            _recv_exact(self._s, HEADER.size))
        if magic != MAGIC:
            raise InferenceServerException("the answer is not a raw protocol frame")
        msg = _recv_exact(self._s, msg_bytes).decode(errors="replace") if msg_bytes else ""
        desc = _recv_exact(self._s, desc_bytes)
        data = _recv_exact(self._s, data_bytes)
        if status:
            raise InferenceServerException(msg or STATUS.get(status, str(status)),
                                           status=STATUS.get(status, str(status)))
        out = {}
        off = 0
        doff = 0
        for _ in range(n_out):
            n = desc[off]
            name = desc[off + 1:off + 1 + n].decode()
            off += 1 + n
            code, rank = desc[off], desc[off + 1]
            off += 2
            shape = struct.unpack_from(f"<{rank}q", desc, off)
            off += 8 * rank
            (nbytes,) = struct.unpack_from("<Q", desc, off)
            off += 8
            raw = data[doff:doff + nbytes]
            doff += nbytes
            dt = NAMES.get(code)
            if dt == "BYTES":
                out[name] = deserialize_bytes_tensor(raw).reshape(shape)
            elif dt == "BF16":
                out[name] = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(
                    np.float32).reshape(shape)
            else:
                out[name] = np.frombuffer(raw, np.dtype(triton_to_np_dtype(dt)).newbyteorder("<")).reshape(
                    shape)
        return out


class HeaderlessClient(_Socket):
    """Headerless mode, the trt-daemon protocol: exactly the single input's
    bytes in, exactly the outputs' bytes out (no way to report an error: the
    server closes the connection)."""

    def infer(self, data, output_bytes):
        """data: a numpy array or bytes of the input at batch 1; returns the
        `output_bytes` bytes of every output, concatenated in model order."""
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data).tobytes()
        self._s.sendall(data)
        return _recv_exact(self._s, output_bytes)
