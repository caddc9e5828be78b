"""An infd server inside the Python process: a ctypes binding of libinfd.so's
public C API (include/infd/infd.h). No sockets: inputs are numpy arrays the
engine reads in place, and outputs are written straight into numpy arrays
when their shapes are known before the run.

    from infd.embedded import Server
    with Server("models") as srv:                     # loads the repository
        out = srv.infer("add_sub", {"INPUT0": a, "INPUT1": b})
        out["OUTPUT0"]

The library is found from $INFD_LIBRARY, then next to a source checkout's
release build (build/release/libinfd.so), then the system's loader path.
"""

import ctypes
import os
import pathlib
import threading

import numpy as np

from infd.utils import (InferenceServerException, deserialize_bytes_tensor, np_to_triton_dtype,
                        raise_error, serialize_byte_tensor, triton_to_np_dtype)

__all__ = ["Server", "Model", "InferenceServerException", "library_path"]

MAX_RANK = 8
ERROR_MSG_BYTES = 512


class _Error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * ERROR_MSG_BYTES)]


class _ServerOptions(ctypes.Structure):
    _fields_ = [("model_repository", ctypes.c_char_p), ("control_mode", ctypes.c_int),
                ("startup_models", ctypes.POINTER(ctypes.c_char_p)),
                ("n_startup_models", ctypes.c_int), ("repository_poll_secs", ctypes.c_int),
                ("n_threads", ctypes.c_int), ("exit_on_error", ctypes.c_bool),
                ("server_id", ctypes.c_char_p), ("pinned_pool_bytes", ctypes.c_size_t)]


class _RepoEntry(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 128), ("version", ctypes.c_int64),
                ("state", ctypes.c_int), ("reason", ctypes.c_char * 512)]


class _ModelIO(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int32),
                ("dims", ctypes.c_int64 * MAX_RANK), ("row_bytes", ctypes.c_size_t)]


class _Shape(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int32), ("dims", ctypes.c_int64 * MAX_RANK)]


class _Tensor(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("shape", _Shape), ("data", ctypes.c_void_p),
                ("nbytes", ctypes.c_size_t), ("owns_data", ctypes.c_bool)]


CONTROL = {"none": 0, "poll": 1, "explicit": 2}
STATES = ["UNKNOWN", "LOADING", "READY", "UNLOADING", "UNAVAILABLE"]


def _fixed_size(datatype):
    """A datatype numpy holds as it is (not BYTES, not BF16)."""
    t = triton_to_np_dtype(datatype)
    return t is not None and t is not np.object_


def library_path():
    """Where libinfd.so is taken from (see the module's docstring)."""
    env = os.environ.get("INFD_LIBRARY")
    if env:
        return env
    here = pathlib.Path(__file__).resolve()
    for parent in here.parents:
        cand = parent / "build" / "release" / "libinfd.so"
        if cand.exists():
            return str(cand)
    return "libinfd.so"


_lib = None
_lib_lock = threading.Lock()


def _load():
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        path = library_path()
        try:
            # RTLD_GLOBAL: processor plugins (backend "plugin") call the
            # library's infd_* functions from their own .so.
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise ImportError(f"infd.embedded: cannot load {path} ({e}); build infd "
                              "(make build) or set INFD_LIBRARY") from None
        P, I, E = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_Error)
        sigs = {
            "infd_server_options_init": (None, [ctypes.POINTER(_ServerOptions)]),
            "infd_server_create": (I, [ctypes.POINTER(_ServerOptions), ctypes.POINTER(P), E]),
            "infd_server_destroy": (None, [P]),
            "infd_server_is_live": (ctypes.c_bool, [P]),
            "infd_server_is_ready": (ctypes.c_bool, [P]),
            "infd_server_repository_index": (I, [P, ctypes.c_bool,
                                                 ctypes.POINTER(ctypes.POINTER(_RepoEntry)),
                                                 ctypes.POINTER(I), E]),
            "infd_server_load_model": (I, [P, ctypes.c_char_p, E]),
            "infd_server_unload_model": (I, [P, ctypes.c_char_p, E]),
            "infd_server_model_acquire": (I, [P, ctypes.c_char_p, ctypes.c_int64,
                                              ctypes.POINTER(P), E]),
            "infd_model_release": (None, [P]),
            "infd_model_name": (ctypes.c_char_p, [P]),
            "infd_model_version": (ctypes.c_int64, [P]),
            "infd_model_platform": (ctypes.c_char_p, [P]),
            "infd_model_max_batch_size": (I, [P]),
            "infd_model_n_inputs": (I, [P]),
            "infd_model_n_outputs": (I, [P]),
            "infd_model_input": (I, [P, I, ctypes.POINTER(_ModelIO)]),
            "infd_model_output": (I, [P, I, ctypes.POINTER(_ModelIO)]),
            "infd_model_config_json": (I, [P, ctypes.POINTER(P), ctypes.POINTER(ctypes.c_size_t),
                                           E]),
            "infd_request_create": (I, [P, ctypes.POINTER(P), E]),
            "infd_request_destroy": (None, [P]),
            "infd_request_set_id": (None, [P, ctypes.c_char_p]),
            "infd_request_add_input": (I, [P, ctypes.c_char_p, I, ctypes.POINTER(ctypes.c_int64),
                                           I, P, ctypes.c_size_t, E]),
            "infd_request_add_output": (I, [P, ctypes.c_char_p, E]),
            "infd_request_set_output_buffer": (I, [P, ctypes.c_char_p, P, ctypes.c_size_t, E]),
            "infd_infer": (I, [P, E]),
            "infd_request_n_outputs": (I, [P]),
            "infd_request_output": (I, [P, I, ctypes.POINTER(ctypes.c_char_p),
                                        ctypes.POINTER(_Tensor)]),
            "infd_dtype_name": (ctypes.c_char_p, [I]),
            "infd_dtype_from_name": (I, [ctypes.c_char_p]),
            "infd_status_name": (ctypes.c_char_p, [I]),
            "infd_free": (None, [P]),
            "infd_version": (ctypes.c_char_p, []),
        }
        for name, (res, args) in sigs.items():
            f = getattr(lib, name)
            f.restype = res
            f.argtypes = args
        _lib = lib
        return lib


def _raise(lib, code, err):
    raise InferenceServerException(msg=err.msg.decode(errors="replace"),
                                   status=lib.infd_status_name(code).decode())


def _check(lib, code, err):
    if code != 0:
        _raise(lib, code, err)


def _io(lib, io):
    dims = [io.dims[k] for k in range(io.rank)]
    return {"name": io.name.decode(), "datatype": lib.infd_dtype_name(io.dtype).decode(),
            "dims": dims}


class _Handle:
    """A libinfd handle freed by close(), `with` or garbage collection."""

    _h = None

    def _free(self, handle):
        raise NotImplementedError

    def close(self):
        if self._h:
            self._free(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Model(_Handle):
    """A READY model version, held until close(): metadata and the config."""

    def __init__(self, server, handle):
        self._lib = server._lib
        self._h = ctypes.c_void_p(handle)

    def _free(self, handle):
        self._lib.infd_model_release(handle)

    @property
    def name(self):
        return self._lib.infd_model_name(self._h).decode()

    @property
    def version(self):
        return self._lib.infd_model_version(self._h)

    @property
    def max_batch_size(self):
        return self._lib.infd_model_max_batch_size(self._h)

    def _ios(self, n_fn, get_fn):
        out = []
        for i in range(n_fn(self._h)):
            io = _ModelIO()
            get_fn(self._h, i, ctypes.byref(io))
            out.append(_io(self._lib, io))
        return out

    def inputs(self):
        return self._ios(self._lib.infd_model_n_inputs, self._lib.infd_model_input)

    def outputs(self):
        return self._ios(self._lib.infd_model_n_outputs, self._lib.infd_model_output)

    def metadata(self):
        return {"name": self.name, "versions": [str(self.version)],
                "platform": self._lib.infd_model_platform(self._h).decode(),
                "max_batch_size": self.max_batch_size, "inputs": self.inputs(),
                "outputs": self.outputs()}

    def config(self):
        import json
        p, n, err = ctypes.c_void_p(), ctypes.c_size_t(), _Error()
        _check(self._lib, self._lib.infd_model_config_json(self._h, ctypes.byref(p),
                                                           ctypes.byref(n), ctypes.byref(err)),
               err)
        try:
            return json.loads(ctypes.string_at(p, n.value))
        finally:
            self._lib.infd_free(p)


class Server(_Handle):
    """infd_server_create on `model_repository`; close() (or `with`) drains
    and destroys it. control_mode: "none" (load everything), "poll" or
    "explicit" (load only `startup_models`, then load_model/unload_model)."""

    def __init__(self, model_repository, control_mode="none", startup_models=None, n_threads=0,
                 exit_on_error=False):
        self._lib = lib = _load()
        opts = _ServerOptions()
        lib.infd_server_options_init(ctypes.byref(opts))
        self._repo = str(model_repository).encode()
        opts.model_repository = self._repo
        if control_mode not in CONTROL:
            raise_error(f"control_mode must be one of {sorted(CONTROL)}")
        opts.control_mode = CONTROL[control_mode]
        self._startup = [m.encode() for m in (startup_models or [])]
        if self._startup:
            arr = (ctypes.c_char_p * len(self._startup))(*self._startup)
            self._startup_arr = arr
            opts.startup_models = arr
            opts.n_startup_models = len(self._startup)
        opts.n_threads = int(n_threads)
        opts.exit_on_error = bool(exit_on_error)
        h, err = ctypes.c_void_p(), _Error()
        _check(lib, lib.infd_server_create(ctypes.byref(opts), ctypes.byref(h), ctypes.byref(err)),
               err)
        self._h = h

    def _free(self, handle):
        self._lib.infd_server_destroy(handle)

    def version(self):
        return self._lib.infd_version().decode()

    def is_live(self):
        return bool(self._lib.infd_server_is_live(self._h))

    def is_ready(self):
        return bool(self._lib.infd_server_is_ready(self._h))

    def repository_index(self, ready_only=False):
        rows, n, err = ctypes.POINTER(_RepoEntry)(), ctypes.c_int(), _Error()
        _check(self._lib, self._lib.infd_server_repository_index(
            self._h, ready_only, ctypes.byref(rows), ctypes.byref(n), ctypes.byref(err)), err)
        try:
            return [{"name": rows[i].name.decode(),
                     "version": "" if rows[i].version < 0 else str(rows[i].version),
                     "state": STATES[rows[i].state], "reason": rows[i].reason.decode()}
                    for i in range(n.value)]
        finally:
            self._lib.infd_free(rows)

    def load_model(self, name):
        err = _Error()
        _check(self._lib, self._lib.infd_server_load_model(self._h, name.encode(),
                                                           ctypes.byref(err)), err)

    def unload_model(self, name):
        err = _Error()
        _check(self._lib, self._lib.infd_server_unload_model(self._h, name.encode(),
                                                             ctypes.byref(err)), err)

    def is_model_ready(self, name, version=-1):
        try:
            self.model(name, version).close()
            return True
        except InferenceServerException:
            return False

    def model(self, name, version=-1):
        """A Model handle of a READY version (-1: the highest)."""
        h, err = ctypes.c_void_p(), _Error()
        _check(self._lib, self._lib.infd_server_model_acquire(
            self._h, name.encode(), int(version), ctypes.byref(h), ctypes.byref(err)), err)
        return Model(self, h.value)

    def infer(self, model_name, inputs, outputs=None, version=-1, request_id=""):
        """inputs: {name: numpy array}, full shapes (batch dim first when the
        model batches). The engine reads the arrays where they are; outputs
        of a known shape are written into new numpy arrays directly.
        Returns {name: numpy array}."""
        lib = self._lib
        model = self.model(model_name, version)
        req, err = ctypes.c_void_p(), _Error()
        try:
            _check(lib, lib.infd_request_create(model._h, ctypes.byref(req), ctypes.byref(err)),
                   err)
            if request_id:
                lib.infd_request_set_id(req, request_id.encode())
            keep = []
            batch = None
            for name, arr in inputs.items():
                arr = np.asarray(arr)
                shape = (ctypes.c_int64 * max(arr.ndim, 1))(*arr.shape)
                if batch is None and arr.ndim:
                    batch = arr.shape[0]
                if arr.dtype == np.object_ or arr.dtype.type == np.bytes_:
                    # BYTES: KServe's layout (a 4-byte length, then the bytes).
                    s = serialize_byte_tensor(arr)
                    data = np.frombuffer(b"" if s is None else s.item(), np.uint8)
                    dt = "BYTES"
                else:
                    data = np.ascontiguousarray(arr)
                    if not data.dtype.isnative:
                        data = data.astype(data.dtype.newbyteorder("="))
                    dt = np_to_triton_dtype(data.dtype)
                    if dt is None:
                        raise_error(f"input {name}: numpy dtype {arr.dtype} is not served here")
                keep.append(data)
                _check(lib, lib.infd_request_add_input(
                    req, name.encode(), lib.infd_dtype_from_name(dt.encode()), shape, arr.ndim,
                    data.ctypes.data_as(ctypes.c_void_p), data.nbytes, ctypes.byref(err)), err)
            # Outputs of a fixed shape go straight into numpy arrays.
            placed = {}
            mb = model.max_batch_size
            wanted = outputs if outputs else [o["name"] for o in model.outputs()]
            meta = {o["name"]: o for o in model.outputs()}
            for name in wanted:
                if outputs:
                    _check(lib, lib.infd_request_add_output(req, name.encode(),
                                                            ctypes.byref(err)), err)
                o = meta.get(name)
                if (o is None or not _fixed_size(o["datatype"]) or (mb > 0 and batch is None)
                        or any(d < 0 for d in o["dims"])):
                    continue  # a size known only after the run: copied out below
                shape = ([batch] if mb > 0 else []) + o["dims"]
                buf = np.empty(shape, triton_to_np_dtype(o["datatype"]))
                if lib.infd_request_set_output_buffer(req, name.encode(),
                                                      buf.ctypes.data_as(ctypes.c_void_p),
                                                      buf.nbytes, ctypes.byref(err)) == 0:
                    placed[name] = buf
            _check(lib, lib.infd_infer(req, ctypes.byref(err)), err)
            out = {}
            for i in range(lib.infd_request_n_outputs(req)):
                cname, t = ctypes.c_char_p(), _Tensor()
                if lib.infd_request_output(req, i, ctypes.byref(cname), ctypes.byref(t)) != 0:
                    continue
                name = cname.value.decode()
                shape = [t.shape.dims[k] for k in range(t.shape.rank)]
                buf = placed.get(name)
                if buf is not None and buf.ctypes.data == t.data and list(buf.shape) == shape:
                    out[name] = buf
                    continue
                dt = lib.infd_dtype_name(t.dtype).decode()
                raw = ctypes.string_at(t.data, t.nbytes) if t.nbytes else b""
                if _fixed_size(dt):
                    out[name] = np.frombuffer(raw, triton_to_np_dtype(dt)).reshape(shape).copy()
                elif dt == "BF16":
                    out[name] = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(
                        np.float32).reshape(shape)
                else:
                    out[name] = deserialize_bytes_tensor(raw).reshape(shape)
            return out
        finally:
            if req:
                lib.infd_request_destroy(req)
            model.close()
