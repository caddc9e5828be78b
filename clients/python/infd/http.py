"""KServe v2 over HTTP, with tritonclient.http's names and signatures, on the
standard library's http.client: a Triton script runs after changing
`import tritonclient.http as httpclient` to `import infd.http as httpclient`.

    import numpy as np
    import infd.http as httpclient

    client = httpclient.InferenceServerClient("localhost:8000")
    a = httpclient.InferInput("INPUT0", [1, 16], "FP32")
    a.set_data_from_numpy(np.ones((1, 16), np.float32))        # binary by default
    result = client.infer("add_sub", [a, ...],
                          outputs=[httpclient.InferRequestedOutput("OUTPUT0")])
    result.as_numpy("OUTPUT0")

Tensors travel with Triton's binary-data extension unless
`binary_data=False` asks for JSON. `concurrency` connections are kept open;
`async_infer` runs on a pool of that many threads.
"""

import http.client
import json
import queue
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from infd.utils import (InferenceServerException, deserialize_bytes_tensor, np_to_triton_dtype,
                        raise_error, serialize_byte_tensor, triton_to_np_dtype)

__all__ = ["InferenceServerClient", "InferInput", "InferRequestedOutput", "InferResult",
           "InferAsyncRequest", "InferenceServerException"]


class InferInput:
    """One input: name, shape (a list with the batch dim) and KServe datatype."""

    def __init__(self, name, shape, datatype):
        self._name = name
        self._shape = list(shape)
        self._datatype = datatype
        self._parameters = {}
        self._data = None      # JSON list
        self._raw = None       # bytes for the binary extension

    def name(self):
        return self._name

    def datatype(self):
        return self._datatype

    def shape(self):
        return self._shape

    def set_shape(self, shape):
        self._shape = list(shape)
        return self

    def set_data_from_numpy(self, input_tensor, binary_data=True):
        """Sets the data from a numpy array whose dtype matches the datatype
        (np.object_ or bytes for BYTES) and whose shape is the input's."""
        if not isinstance(input_tensor, np.ndarray):
            raise_error("input_tensor must be a numpy array")
        dtype = np_to_triton_dtype(input_tensor.dtype)
        if self._datatype == "BF16":
            if input_tensor.dtype != np.float32:
                raise_error("BF16 data is given as a float32 array")
        elif dtype != self._datatype:
            raise_error(f"input {self._name}: got a {dtype} array for datatype {self._datatype}")
        if list(input_tensor.shape) != self._shape:
            raise_error(f"input {self._name}: got shape {list(input_tensor.shape)}, "
                        f"expected {self._shape}")
        self._parameters.pop("binary_data_size", None)
        if binary_data:
            self._data = None
            if self._datatype == "BYTES":
                s = serialize_byte_tensor(input_tensor)
                self._raw = b"" if s is None else s.item()
            elif self._datatype == "BF16":
                bits = np.ascontiguousarray(input_tensor, np.float32).view(np.uint32)
                self._raw = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()
            else:
                self._raw = np.ascontiguousarray(input_tensor).astype(
                    input_tensor.dtype.newbyteorder("<"), copy=False).tobytes()
            self._parameters["binary_data_size"] = len(self._raw)
        else:
            self._raw = None
            if self._datatype == "BYTES":
                self._data = [x.decode("utf-8") if isinstance(x, bytes) else str(x)
                              for x in input_tensor.flatten()]
            else:
                self._data = input_tensor.flatten().tolist()
        return self

    def set_shared_memory(self, region_name, byte_size, offset=0):
        """The data is `byte_size` bytes at `offset` of registered region
        `region_name` (Triton's shared-memory extension), not in the request."""
        self._data = None
        self._raw = None
        self._parameters.pop("binary_data_size", None)
        self._parameters["shared_memory_region"] = region_name
        self._parameters["shared_memory_byte_size"] = int(byte_size)
        if offset:
            self._parameters["shared_memory_offset"] = int(offset)
        else:
            self._parameters.pop("shared_memory_offset", None)
        return self

    def _get_tensor(self):
        t = {"name": self._name, "shape": self._shape, "datatype": self._datatype}
        if self._parameters:
            t["parameters"] = dict(self._parameters)
        if self._data is not None:
            t["data"] = self._data
        return t


class InferRequestedOutput:
    """An output to return: binary (the extension) or JSON; class_count > 0
    asks for the classification extension's top classes."""

    def __init__(self, name, binary_data=True, class_count=0):
        self._name = name
        self._parameters = {"binary_data": bool(binary_data)}
        if class_count:
            self._parameters["classification"] = int(class_count)

    def name(self):
        return self._name

    def set_shared_memory(self, region_name, byte_size, offset=0):
        """The server writes the output into `byte_size` bytes at `offset` of
        registered region `region_name`; as_numpy then returns None (read it
        with infd.utils.shared_memory.get_contents_as_numpy)."""
        self._parameters.pop("binary_data", None)
        self._parameters["shared_memory_region"] = region_name
        self._parameters["shared_memory_byte_size"] = int(byte_size)
        if offset:
            self._parameters["shared_memory_offset"] = int(offset)
        return self

    def _get_tensor(self):
        return {"name": self._name, "parameters": dict(self._parameters)}


class InferResult:
    """The response: get_response() (the JSON part as a dict), get_output(name)
    and as_numpy(name)."""

    def __init__(self, response, binary=b""):
        self._response = response
        self._buffers = {}
        off = 0
        for out in response.get("outputs", []):
            size = out.get("parameters", {}).get("binary_data_size")
            if size is not None:
                self._buffers[out["name"]] = binary[off:off + size]
                off += size

    @classmethod
    def from_response_body(cls, body, verbose=False, header_length=None):
        if header_length is None:
            return cls(json.loads(body))
        return cls(json.loads(body[:header_length]), body[header_length:])

    def get_response(self):
        return self._response

    def get_output(self, name):
        for out in self._response.get("outputs", []):
            if out["name"] == name:
                return out
        return None

    def as_numpy(self, name):
        """The output as a numpy array of its shape, None if absent."""
        out = self.get_output(name)
        if out is None:
            return None
        shape = out["shape"]
        dtype = out["datatype"]
        if "shared_memory_region" in out.get("parameters", {}):
            return None  # in the client's shared memory region
        if name in self._buffers:
            raw = self._buffers[name]
            if dtype == "BYTES":
                return deserialize_bytes_tensor(raw).reshape(shape)
            if dtype == "BF16":
                bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
                return bits.view(np.float32).reshape(shape)
            return np.frombuffer(raw, np.dtype(triton_to_np_dtype(dtype)).newbyteorder("<")
                                 ).reshape(shape)
        data = out.get("data", [])
        if dtype == "BYTES":
            return np.array([x.encode("utf-8") if isinstance(x, str) else x for x in data],
                            dtype=np.object_).reshape(shape)
        npt = np.float32 if dtype == "BF16" else triton_to_np_dtype(dtype)
        return np.array(data, dtype=npt).reshape(shape)


class InferAsyncRequest:
    """What async_infer returns: get_result(block=True, timeout=None)."""

    def __init__(self, future):
        self._future = future

    def get_result(self, block=True, timeout=None):
        if not block and not self._future.done():
            raise_error("the result is not ready yet")
        return self._future.result(timeout=timeout)


def _infer_body(inputs, outputs, request_id, sequence_id, sequence_start, sequence_end,
                priority, timeout, parameters):
    req = {"inputs": [i._get_tensor() for i in inputs]}
    if request_id:
        req["id"] = request_id
    if outputs:
        req["outputs"] = [o._get_tensor() for o in outputs]
    else:
        # As tritonclient: without requested outputs, every output comes back binary.
        req.setdefault("parameters", {})["binary_data_output"] = True
    params = req.setdefault("parameters", {})
    if sequence_id:
        params["sequence_id"] = sequence_id
        params["sequence_start"] = bool(sequence_start)
        params["sequence_end"] = bool(sequence_end)
    if priority:
        params["priority"] = priority
    if timeout is not None:
        params["timeout"] = timeout
    if parameters:
        params.update(parameters)
    if not params:
        del req["parameters"]
    head = json.dumps(req, separators=(",", ":")).encode()
    raws = [i._raw for i in inputs if i._raw is not None]
    return head, raws


class InferenceServerClient:
    """A client of one server: url is "HOST:PORT" (or http://HOST:PORT)."""

    def __init__(self, url, verbose=False, concurrency=1, connection_timeout=60.0,
                 network_timeout=60.0, max_greenlets=None, ssl=False, ssl_options=None,
                 ssl_context_factory=None, insecure=False):
        if ssl:
            raise_error("TLS is not supported by this client yet")
        if "://" not in url:
            url = "http://" + url
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise_error(f"url '{url}': expected HOST:PORT or http://HOST:PORT")
        self._host = u.hostname
        self._port = u.port or 80
        self._base = u.path.rstrip("/")
        self._verbose = verbose
        self._timeout = network_timeout
        self._connection_timeout = connection_timeout
        self._pool = queue.LifoQueue()
        self._concurrency = max(1, int(concurrency))
        self._executor = None
        self._lock = threading.Lock()

    # -- plumbing ---------------------------------------------------------------

    def _conn(self):
        try:
            return self._pool.get_nowait()
        except queue.Empty:
            return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)

    def _request(self, method, path, body=None, headers=None):
        """(status, headers, body bytes); connection errors raise."""
        conn = self._conn()
        try:
            conn.request(method, self._base + path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise InferenceServerException(f"{method} {path}: {e}") from None
        if self._verbose:
            print(f"{method} {path} -> {resp.status}")
        if resp.will_close:
            conn.close()
        else:
            self._pool.put(conn)
        return resp.status, resp, data

    @staticmethod
    def _error(status, data):
        try:
            msg = json.loads(data).get("error", data.decode(errors="replace"))
        except ValueError:
            msg = data.decode(errors="replace")
        return InferenceServerException(msg=msg, status=str(status))

    def _get_json(self, path, method="GET", body=None):
        status, _, data = self._request(method, path, body,
                                        {"Content-Type": "application/json"} if body else None)
        if status != 200:
            raise self._error(status, data)
        return json.loads(data) if data else {}

    @staticmethod
    def _model_path(model_name, model_version):
        p = "/v2/models/" + urllib.parse.quote(model_name, safe="")
        if model_version:
            p += "/versions/" + urllib.parse.quote(str(model_version), safe="")
        return p

    def close(self):
        while True:
            try:
                self._pool.get_nowait().close()
            except queue.Empty:
                break
        if self._executor:
            self._executor.shutdown(wait=True)
            self._executor = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- health and metadata -----------------------------------------------------

    def is_server_live(self, headers=None, query_params=None):
        return self._request("GET", "/v2/health/live")[0] == 200

    def is_server_ready(self, headers=None, query_params=None):
        return self._request("GET", "/v2/health/ready")[0] == 200

    def is_model_ready(self, model_name, model_version="", headers=None, query_params=None):
        return self._request("GET", self._model_path(model_name, model_version) + "/ready")[0] == 200

    def get_server_metadata(self, headers=None, query_params=None):
        return self._get_json("/v2")

    def get_model_metadata(self, model_name, model_version="", headers=None, query_params=None):
        return self._get_json(self._model_path(model_name, model_version))

    def get_model_config(self, model_name, model_version="", headers=None, query_params=None):
        return self._get_json(self._model_path(model_name, model_version) + "/config")

    def get_model_repository_index(self, headers=None, query_params=None):
        return self._get_json("/v2/repository/index", "POST", b"{}")

    def get_system_shared_memory_status(self, region_name="", headers=None, query_params=None):
        """[{"name", "key", "offset", "byte_size"}] of every registered region,
        or of `region_name`."""
        path = "/v2/systemsharedmemory"
        if region_name:
            path += "/region/" + urllib.parse.quote(region_name, safe="")
        return self._get_json(path + "/status")

    def register_system_shared_memory(self, name, key, byte_size, offset=0, headers=None,
                                      query_params=None):
        """Registers region `name`: `byte_size` bytes at `offset` of the POSIX
        shared memory object `key` ("/..."). The server needs
        --enable-shared-memory system."""
        body = json.dumps({"key": key, "offset": int(offset), "byte_size": int(byte_size)})
        self._get_json("/v2/systemsharedmemory/region/" + urllib.parse.quote(name, safe="") + "/register",
                       method="POST", body=body.encode())

    def unregister_system_shared_memory(self, name="", headers=None, query_params=None):
        """Unregisters region `name`, or every region."""
        path = "/v2/systemsharedmemory"
        if name:
            path += "/region/" + urllib.parse.quote(name, safe="")
        self._get_json(path + "/unregister", method="POST")

    def get_cuda_shared_memory_status(self, region_name="", headers=None, query_params=None):
        """[{"name", "device_id", "byte_size"}] of every registered CUDA region,
        or of `region_name`."""
        path = "/v2/cudasharedmemory"
        if region_name:
            path += "/region/" + urllib.parse.quote(region_name, safe="")
        return self._get_json(path + "/status")

    def register_cuda_shared_memory(self, name, raw_handle, device_id, byte_size, headers=None,
                                    query_params=None):
        """Registers CUDA region `name`: `byte_size` bytes of the device memory
        whose cudaIpcMemHandle_t `raw_handle` gives, base64-encoded
        (utils.cuda_shared_memory.get_raw_handle), on GPU `device_id`. The
        server needs --enable-shared-memory cuda."""
        if isinstance(raw_handle, bytes):
            raw_handle = raw_handle.decode()
        body = json.dumps({"raw_handle": {"b64": raw_handle}, "device_id": int(device_id),
                           "byte_size": int(byte_size)})
        self._get_json("/v2/cudasharedmemory/region/" + urllib.parse.quote(name, safe="") + "/register",
                       method="POST", body=body.encode())

    def unregister_cuda_shared_memory(self, name="", headers=None, query_params=None):
        """Unregisters CUDA region `name`, or every CUDA region."""
        path = "/v2/cudasharedmemory"
        if name:
            path += "/region/" + urllib.parse.quote(name, safe="")
        self._get_json(path + "/unregister", method="POST")

    def load_model(self, model_name, headers=None, query_params=None, config=None, files=None):
        if config is not None or files:
            raise_error("load_model: config and files overrides are not supported")
        self._get_json(f"/v2/repository/models/{urllib.parse.quote(model_name, safe='')}/load",
                       "POST", b"{}")

    def unload_model(self, model_name, headers=None, query_params=None,
                     unload_dependents=False):
        self._get_json(f"/v2/repository/models/{urllib.parse.quote(model_name, safe='')}/unload",
                       "POST", b"{}")

    def get_inference_statistics(self, model_name="", model_version="", headers=None,
                                 query_params=None):
        if not model_name:
            return self._get_json("/v2/models/stats")
        return self._get_json(self._model_path(model_name, model_version) + "/stats")

    # -- inference ---------------------------------------------------------------

    def infer(self, model_name, inputs, model_version="", outputs=None, request_id="",
              sequence_id=0, sequence_start=False, sequence_end=False, priority=0, timeout=None,
              headers=None, query_params=None, request_compression_algorithm=None,
              response_compression_algorithm=None, parameters=None):
        """Runs one request; returns an InferResult or raises
        InferenceServerException with the server's message."""
        if request_compression_algorithm or response_compression_algorithm:
            raise_error("compression is not supported by this client yet")
        head, raws = _infer_body(inputs, outputs, request_id, sequence_id, sequence_start,
                                 sequence_end, priority, timeout, parameters)
        hdrs = dict(headers or {})
        if raws:
            body = b"".join([head] + raws)
            hdrs["Content-Type"] = "application/octet-stream"
            hdrs["Inference-Header-Content-Length"] = str(len(head))
        else:
            body = head
            hdrs["Content-Type"] = "application/json"
        status, resp, data = self._request("POST", self._model_path(model_name, model_version) +
                                           "/infer", body, hdrs)
        if status != 200:
            raise self._error(status, data)
        hl = resp.getheader("Inference-Header-Content-Length")
        return InferResult.from_response_body(data, header_length=None if hl is None else int(hl))

    def async_infer(self, model_name, inputs, model_version="", outputs=None, request_id="",
                    sequence_id=0, sequence_start=False, sequence_end=False, priority=0,
                    timeout=None, headers=None, query_params=None,
                    request_compression_algorithm=None, response_compression_algorithm=None,
                    parameters=None):
        """As infer, on one of `concurrency` threads; returns an
        InferAsyncRequest whose get_result() gives the InferResult."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self._concurrency)
        fut = self._executor.submit(self.infer, model_name, inputs, model_version, outputs,
                                    request_id, sequence_id, sequence_start, sequence_end,
                                    priority, timeout, headers, query_params,
                                    request_compression_algorithm,
                                    response_compression_algorithm, parameters)
        return InferAsyncRequest(fut)
