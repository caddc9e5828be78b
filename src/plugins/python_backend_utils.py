"""infd's embedded Python processors (backend "python"): the model-side API.

A model's `model.py` defines `TritonPythonModel` with `initialize(args)`,
`execute(requests)` and `finalize()`, as Triton's Python backend has it, and
imports this module as `triton_python_backend_utils` (Triton's name) or
`infd_backend_utils`. The server (src/plugins/python.c) compiles this file
into the infd binary and calls the functions whose names start with `_`.

Inputs are numpy arrays over the request's own memory, read-only and valid
only while `execute` runs; BYTES inputs are object arrays of `bytes` (a
copy). Outputs are copied into the request when `execute` returns.
"""

import importlib.util
import json
import os
import struct
import sys
import traceback

import numpy as np

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2

# KServe datatype <-> numpy. The C side passes infd_dtype_name()'s names.
_NP = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
    "BYTES": np.object_,
}


def triton_string_to_numpy(triton_type_string):
    """np.float32 for "TYPE_FP32" (a config's data_type) or "FP32"."""
    name = triton_type_string[5:] if triton_type_string.startswith("TYPE_") else triton_type_string
    if name == "STRING":
        name = "BYTES"
    if name not in _NP:
        raise TritonError(f"datatype '{triton_type_string}' has no numpy type here",
                          TritonError.UNSUPPORTED)
    return _NP[name]


def numpy_to_triton_string(dtype):
    """"FP32" for np.float32, "BYTES" for object and bytes arrays."""
    dt = np.dtype(dtype)
    if dt == np.object_ or dt.kind in ("S", "U"):
        return "BYTES"
    for name, t in _NP.items():
        if name != "BYTES" and np.dtype(t) == dt:
            return name
    raise TritonError(f"numpy dtype {dt} has no KServe datatype", TritonError.INVALID_ARG)


class TritonError(Exception):
    """An error for one request (`InferenceResponse(error=...)`) or, raised
    from `execute`, for all of them. `code` is one of the class constants."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message, code=INTERNAL):
        super().__init__(message)
        self._message = str(message)
        self._code = code

    def message(self):
        return self._message

    def code(self):
        return self._code


# TritonError's codes as infd_status names (C maps the name back).
_CODE_STATUS = {
    TritonError.UNKNOWN: "INTERNAL", TritonError.INTERNAL: "INTERNAL",
    TritonError.NOT_FOUND: "NOT_FOUND", TritonError.INVALID_ARG: "INVALID_ARGUMENT",
    TritonError.UNAVAILABLE: "UNAVAILABLE", TritonError.UNSUPPORTED: "UNIMPLEMENTED",
    TritonError.ALREADY_EXISTS: "INVALID_ARGUMENT", TritonError.CANCELLED: "CANCELLED",
}


class Tensor:
    """A named tensor: `Tensor(name, numpy_array)`."""

    def __init__(self, name, array):
        if not isinstance(array, np.ndarray):
            raise TritonError(f"Tensor '{name}': a numpy array is needed, not "
                              f"{type(array).__name__}", TritonError.INVALID_ARG)
        self._name = name
        self._array = array

    def name(self):
        return self._name

    def as_numpy(self):
        return self._array

    def shape(self):
        return list(self._array.shape)

    def triton_dtype(self):
        return numpy_to_triton_string(self._array.dtype)

    def is_cpu(self):
        return True

    def __repr__(self):
        return f"Tensor({self._name!r}, {self._array.dtype}{list(self._array.shape)})"


class InferenceRequest:
    """One request of the batch that `execute` gets."""

    def __init__(self, inputs, request_id="", correlation_id=0, flags=0,
                 requested_output_names=(), model_name="", **kwargs):
        self._inputs = list(inputs)
        self._id = request_id
        self._correlation_id = correlation_id
        self._flags = flags
        self._requested = list(requested_output_names)
        self._model_name = model_name
        self._bls = kwargs

    def inputs(self):
        return self._inputs

    def request_id(self):
        return self._id

    def correlation_id(self):
        return self._correlation_id

    def flags(self):
        return self._flags

    def requested_output_names(self):
        return self._requested

    def model_name(self):
        return self._model_name

    def parameters(self):
        return "{}"

    def is_cancelled(self):
        return False

    def get_response_sender(self):
        raise TritonError("decoupled models (response senders) are not supported by infd's "
                          "python backend", TritonError.UNSUPPORTED)

    def exec(self, *args, **kwargs):
        raise TritonError("BLS (InferenceRequest.exec) is not supported by infd's python "
                          "backend: make the steps an ensemble (docs/PIPELINES.md)",
                          TritonError.UNSUPPORTED)

    async_exec = exec


class InferenceResponse:
    """`InferenceResponse(output_tensors=[Tensor, ...], error=None)`."""

    def __init__(self, output_tensors=(), error=None):
        self._outputs = list(output_tensors)
        self._error = error

    def output_tensors(self):
        return self._outputs

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error


def get_input_tensor_by_name(request, name):
    for t in request.inputs():
        if t.name() == name:
            return t
    return None


def get_output_tensor_by_name(response, name):
    for t in response.output_tensors():
        if t.name() == name:
            return t
    return None


def get_input_config_by_name(model_config, name):
    for c in model_config.get("input", []):
        if c.get("name") == name:
            return c
    return None


def get_output_config_by_name(model_config, name):
    for c in model_config.get("output", []):
        if c.get("name") == name:
            return c
    return None


class ModelConfig:
    """What `TritonPythonModel.auto_complete_config(auto_complete_model_config)`
    gets: it may add the inputs and outputs that config.pbtxt leaves out."""

    def __init__(self, config):
        self._config = config

    def as_dict(self):
        return self._config

    def _add(self, kind, spec):
        for key in ("name", "data_type", "dims"):
            if key not in spec:
                raise TritonError(f"auto_complete_config: {kind} {spec!r} lacks '{key}'",
                                  TritonError.INVALID_ARG)
        lst = self._config.setdefault(kind, [])
        for c in lst:
            if c.get("name") == spec["name"]:
                if (c.get("data_type") != spec["data_type"] or
                        [int(d) for d in c.get("dims", [])] != [int(d) for d in spec["dims"]]):
                    raise TritonError(f"auto_complete_config: {kind} '{spec['name']}' differs "
                                      "from config.pbtxt's", TritonError.INVALID_ARG)
                return
        lst.append(dict(spec))

    def add_input(self, spec):
        self._add("input", spec)

    def add_output(self, spec):
        self._add("output", spec)

    def max_batch_size(self):
        return int(self._config.get("max_batch_size", 0))

    def set_max_batch_size(self, n):
        if int(n) != self.max_batch_size():
            raise TritonError("auto_complete_config: set max_batch_size in config.pbtxt; infd "
                              "does not change it from model.py", TritonError.UNSUPPORTED)

    def set_dynamic_batching(self):
        if "dynamic_batching" not in self._config:
            raise TritonError("auto_complete_config: add dynamic_batching to config.pbtxt; "
                              "infd does not change it from model.py", TritonError.UNSUPPORTED)


# ---------------------------------------------------------------------------
# Called by the server (python.c). Exceptions propagate to C, which turns
# them into model or request errors with _describe().


def _describe(exc):
    """One line: the exception and where model.py raised it."""
    if isinstance(exc, TritonError):
        text = exc.message()
    else:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    frames = traceback.extract_tb(exc.__traceback__)
    # The innermost frame outside this module: where the model's code was.
    for f in reversed(frames):
        if os.path.basename(f.filename) != "<infd_backend_utils>":
            text += f" ({os.path.basename(f.filename)}, line {f.lineno}, in {f.name})"
            break
    return text


def _status(exc):
    return _CODE_STATUS.get(exc.code(), "INTERNAL") if isinstance(exc, TritonError) else "INTERNAL"


def _dims(spec, where):
    dims = [int(d) for d in spec.get("dims", [])]
    if "reshape" in spec:
        raise TritonError(f"{where}: reshape is not supported by the python backend",
                          TritonError.UNSUPPORTED)
    return dims


class _Model:
    def __init__(self, path, name, version, config_json, n_instances, kind):
        self.name = name
        config = json.loads(config_json)
        filename = config.get("default_model_filename") or "model.py"
        file = os.path.join(path, filename)
        if not os.path.isfile(file):
            raise TritonError(f"{file}: no such file (the python backend loads the version "
                              "folder's model.py, or default_model_filename)",
                              TritonError.NOT_FOUND)
        # The version folder comes first on sys.path while the module loads,
        # so model.py imports the files beside it.
        sys.path.insert(0, path)
        try:
            spec = importlib.util.spec_from_file_location(f"infd_model_{name}_{version}", file)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(path)
        cls = getattr(module, "TritonPythonModel", None)
        if cls is None:
            raise TritonError(f"{file} defines no class TritonPythonModel", TritonError.NOT_FOUND)
        if not callable(getattr(cls, "execute", None)):
            raise TritonError(f"{file}: TritonPythonModel has no execute(self, requests)",
                              TritonError.NOT_FOUND)
        if callable(getattr(cls, "auto_complete_config", None)):
            config = cls.auto_complete_config(ModelConfig(config)).as_dict()
        self.config = config
        self.inputs = [(c["name"], self._type(c, "input"), _dims(c, f"input '{c['name']}'"))
                       for c in config.get("input", [])]
        self.outputs = [(c["name"], self._type(c, "output"), _dims(c, f"output '{c['name']}'"))
                        for c in config.get("output", [])]
        self.output_index = {o[0]: j for j, o in enumerate(self.outputs)}
        self.output_type = {o[0]: o[1] for o in self.outputs}
        self.instances = []
        args = {
            "model_config": json.dumps(config),
            "model_instance_kind": kind,
            "model_instance_device_id": "0",
            "model_repository": os.path.dirname(os.path.abspath(path)),  # the model's folder
            "model_version": str(version),
            "model_name": name,
        }
        for i in range(n_instances):
            obj = cls()
            init = getattr(obj, "initialize", None)
            if callable(init):
                init(dict(args, model_instance_name=f"{name}_{i}"))
            self.instances.append(obj)

    @staticmethod
    def _type(spec, what):
        t = spec.get("data_type", "")
        name = t[5:] if t.startswith("TYPE_") else t
        if name == "STRING":
            name = "BYTES"
        if name not in _NP:
            raise TritonError(f"{what} '{spec.get('name')}': data_type '{t}' is not supported "
                              "by the python backend", TritonError.UNSUPPORTED)
        return name

    def finalize(self):
        errors = []
        for obj in self.instances:
            fin = getattr(obj, "finalize", None)
            if callable(fin):
                try:
                    fin()
                except Exception as exc:  # reported, the others still finalize
                    errors.append(_describe(exc))
        self.instances = []
        return "; ".join(errors)


def _load(path, name, version, config_json, n_instances, kind):
    return _Model(path, name, version, config_json, n_instances, kind)


def _input_array(dtype, shape, view):
    """A read-only numpy array over the request's bytes (BYTES: a copy)."""
    if dtype != "BYTES":
        return np.frombuffer(view, dtype=_NP[dtype]).reshape(shape)
    items = []
    buf = bytes(view)
    off = 0
    n = int(np.prod(shape)) if len(shape) else 1
    for _ in range(n):
        (ln,) = struct.unpack_from("<I", buf, off)
        off += 4
        items.append(buf[off:off + ln])
        off += ln
    arr = np.empty(n, dtype=np.object_)
    arr[:] = items
    return arr.reshape(shape)


def _output_bytes(name, dtype, array):
    """(shape, a C-contiguous buffer) for output `name` of datatype `dtype`."""
    if dtype == "BYTES":
        if array.dtype != np.object_ and array.dtype.kind not in ("S", "U"):
            raise TritonError(f"output '{name}' is BYTES; execute gave {array.dtype}",
                              TritonError.INVALID_ARG)
        parts = []
        for item in array.reshape(-1):
            if isinstance(item, str):
                item = item.encode()
            elif not isinstance(item, (bytes, bytearray, memoryview, np.bytes_)):
                item = str(item).encode()
            parts.append(struct.pack("<I", len(item)))
            parts.append(bytes(item))
        return tuple(array.shape), b"".join(parts)
    want = np.dtype(_NP[dtype])
    if array.dtype != want:
        raise TritonError(f"output '{name}' is {dtype}; execute gave {array.dtype}",
                          TritonError.INVALID_ARG)
    return tuple(array.shape), np.ascontiguousarray(array)


def _execute(model, instance, batch):
    """batch: per request (id, correlation_id, flags, [(name, dtype, shape,
    view)], [requested output names]). Returns per request either
    (status_name, message) or [(output_index, dtype, shape, buffer)]."""
    requests = []
    for rid, corr, flags, inputs, wanted in batch:
        tensors = [Tensor(n, _input_array(dt, shape, view)) for n, dt, shape, view in inputs]
        requests.append(InferenceRequest(tensors, rid, corr, flags, wanted, model.name))
    responses = model.instances[instance].execute(requests)
    if responses is None or len(responses) != len(requests):
        got = "None" if responses is None else str(len(responses))
        raise TritonError(f"execute returned {got} responses for {len(requests)} requests",
                          TritonError.INTERNAL)
    out = []
    for k, resp in enumerate(responses):
        if not isinstance(resp, InferenceResponse):
            raise TritonError(f"execute's response {k} is a {type(resp).__name__}, not an "
                              "InferenceResponse", TritonError.INTERNAL)
        err = resp.error()
        if err is not None:
            if isinstance(err, TritonError):
                out.append((_status(err), err.message()))
            else:
                out.append(("INTERNAL", str(err)))
            continue
        try:
            sets = []
            for t in resp.output_tensors():
                j = model.output_index.get(t.name())
                if j is None:
                    raise TritonError(f"execute gave output '{t.name()}', which the model does "
                                      "not declare", TritonError.INVALID_ARG)
                dtype = model.output_type[t.name()]
                shape, data = _output_bytes(t.name(), dtype, t.as_numpy())
                sets.append((j, dtype, shape, data))
            out.append(sets)
        except TritonError as exc:
            out.append((_status(exc), exc.message()))
    return out
