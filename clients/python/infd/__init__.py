"""infd's Python client and binding.

    infd.http      KServe v2 over HTTP, tritonclient.http's API
    infd.grpc      KServe v2 over gRPC, tritonclient.grpc's API (grpcio)
    infd.raw       the raw socket protocol, framed and headerless
    infd.queue     jobs through the Redis job queue (redis-py)
    infd.embedded  an in-process server: a ctypes binding of libinfd.so
    infd.utils     datatypes, BYTES tensors, InferenceServerException

Each submodule is imported on its own, so one whose dependency is missing
(grpcio, redis-py) does not stop the others.
"""

__version__ = "0.1.0"
