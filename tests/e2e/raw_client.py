"""A plain-socket client of infd's raw protocol (docs/RAW_PROTOCOL.md), for the tests.

    with RawClient.unix(srv.raw_dir / "identity.sock") as c:
        out = c.headerless(x.tobytes(), nbytes_out)
    with RawClient.unix(srv.raw_dir / "add_sub.framed.sock") as c:
        status, msg, outs = c.framed({"INPUT0": a, "INPUT1": b})
"""

import socket
import struct

import numpy as np

MAGIC = b"INFD"
VERSION = 1
HEADER = struct.Struct("<4sBBHQHHIQ")  # 32 bytes, little-endian
assert HEADER.size == 32
FLAG_CLOSING = 0x01
FLAG_SHM = 0x02  # descriptors carry shared-memory references

# Wire dtype codes: infd_dtype's values (include/infd/infd.h).
DTYPES = ["INVALID", "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
          "INT64", "FP16", "BF16", "FP32", "FP64", "BYTES"]
CODE = {name: i for i, name in enumerate(DTYPES)}
NUMPY = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
         "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
         "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64}
FROM_NUMPY = {np.dtype(v): k for k, v in NUMPY.items()}

STATUS = ["OK", "INVALID_ARGUMENT", "NOT_FOUND", "UNAVAILABLE", "RESOURCE_EXHAUSTED",
          "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "OUT_OF_MEMORY", "IO", "INTERNAL"]


class ConnectionClosed(Exception):
    pass


class RawClient:
    def __init__(self, sock: socket.socket):
        self.sock = sock

    @classmethod
    def unix(cls, path, timeout=60.0):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(str(path))
        return cls(s)

    @classmethod
    def tcp(cls, port, host="127.0.0.1", timeout=60.0):
        s = socket.create_connection((host, port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(s)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionClosed(f"connection closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def at_eof(self) -> bool:
        """True when the server closed the connection (reads until EOF)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    # -- headerless --------------------------------------------------------------

    def headerless(self, data: bytes, out_bytes: int) -> bytes:
        self.sock.sendall(data)
        return self.recv_exact(out_bytes)

    # -- framed ------------------------------------------------------------------

    @staticmethod
    def encode(inputs, outputs=(), request_id=1, dtypes=None, nbytes=None, version=VERSION,
               magic=MAGIC, shm_inputs=None, shm_outputs=None):
        """inputs: {name: ndarray}; dtypes / nbytes: {name: code or byte count} overrides
        to build bad requests. shm_inputs {name: (region, offset)} and shm_outputs
        {name: (region, offset, byte_size)} put tensors in shared memory (FLAG_SHM; an
        input there gives only its shape and dtype). Returns the request's bytes."""
        shm = shm_inputs is not None or shm_outputs is not None
        shm_inputs, shm_outputs = shm_inputs or {}, shm_outputs or {}

        def ref(where, output):
            if not shm:
                return b""
            if where is None:
                return b"\0"
            rb = where[0].encode()
            return (struct.pack("<B", len(rb)) + rb + struct.pack("<Q", where[1]) +
                    (struct.pack("<Q", where[2]) if output else b""))

        desc = bytearray()
        data = bytearray()
        for name, arr in inputs.items():
            arr = np.ascontiguousarray(arr)
            raw = arr.tobytes()
            code = (dtypes or {}).get(name, CODE[FROM_NUMPY[arr.dtype]])
            n = (nbytes or {}).get(name, len(raw))
            nb = name.encode()
            desc += struct.pack("<B", len(nb)) + nb + struct.pack("<BB", code, arr.ndim)
            desc += struct.pack(f"<{arr.ndim}q", *arr.shape)
            desc += struct.pack("<Q", n)
            desc += ref(shm_inputs.get(name), False)
            if name not in shm_inputs:
                data += raw[:n] + bytes(max(0, n - len(raw)))
        for name in outputs:
            nb = name.encode()
            desc += struct.pack("<B", len(nb)) + nb + ref(shm_outputs.get(name), True)
        head = HEADER.pack(magic, version, FLAG_SHM if shm else 0, 0, request_id, len(inputs),
                           len(outputs), len(desc), len(data))
        return head + bytes(desc) + bytes(data)

    def read_response(self):
        """Returns (request_id, status name, message, flags, {name: ndarray}); with
        FLAG_SHM an output written to its shared-memory region is (dtype, dims, nbytes)
        instead of an array."""
        magic, version, flags, status, rid, n_out, msg_len, desc_len, data_len = \
            HEADER.unpack(self.recv_exact(HEADER.size))
        assert magic == MAGIC and version == VERSION, (magic, version)
        msg = self.recv_exact(msg_len).decode() if msg_len else ""
        desc = self.recv_exact(desc_len) if desc_len else b""
        outs = {}
        p = 0
        for _ in range(n_out):
            ln = desc[p]
            name = desc[p + 1:p + 1 + ln].decode()
            p += 1 + ln
            code, rank = desc[p], desc[p + 1]
            p += 2
            dims = struct.unpack_from(f"<{rank}q", desc, p)
            p += 8 * rank
            (nb,) = struct.unpack_from("<Q", desc, p)
            p += 8
            in_region = False
            if flags & FLAG_SHM:
                in_region = desc[p] == 1
                p += 1
            outs[name] = (DTYPES[code], dims, nb, in_region)
        assert p == len(desc)
        data = self.recv_exact(data_len) if data_len else b""
        result = {}
        off = 0
        for name, (dt, dims, nb, in_region) in outs.items():
            if in_region:
                result[name] = (dt, dims, nb)
                continue
            result[name] = np.frombuffer(data[off:off + nb], dtype=NUMPY[dt]).reshape(dims)
            off += nb
        assert off == data_len
        return rid, STATUS[status], msg, flags, result

    def framed(self, inputs, outputs=(), request_id=1, **kw):
        """Sends one framed request; returns (status, message, {name: ndarray})."""
        self.sock.sendall(self.encode(inputs, outputs, request_id, **kw))
        rid, status, msg, _flags, result = self.read_response()
        assert rid == request_id, (rid, request_id)
        return status, msg, result
