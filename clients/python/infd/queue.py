"""Jobs through infd's Redis job queue (docs/REDIS.md): submit, then wait
for or poll the result. Needs redis-py (Debian python3-redis).

    import numpy as np
    from infd.http import InferInput
    from infd.queue import QueueClient

    q = QueueClient("redis://127.0.0.1:6379")
    a = InferInput("INPUT0", [1, 16], "FP32").set_data_from_numpy(x)
    b = InferInput("INPUT1", [1, 16], "FP32").set_data_from_numpy(y)
    job = q.submit("add_sub", [a, b])                 # the job id
    result = q.wait(job, timeout=10)                  # an infd.http.InferResult
    result.as_numpy("OUTPUT0")

Inputs and requested outputs are infd.http's InferInput and
InferRequestedOutput: binary inputs go as the job's `header` and `binary`
fields, JSON ones as its `request`.
"""

import json
import time
import uuid

from infd.http import InferResult, _infer_body
from infd.utils import InferenceServerException, raise_error

try:
    import redis
except ImportError as e:  # pragma: no cover - depends on the machine
    raise ImportError("infd.queue needs redis-py (Debian: apt install python3-redis)") from e

__all__ = ["QueueClient", "InferenceServerException"]


class QueueClient:
    """Submits jobs to `{prefix}:jobs:{model}` and reads `results:{id}`."""

    def __init__(self, url="redis://127.0.0.1:6379", prefix="infd", client=None):
        self._r = client if client is not None else redis.Redis.from_url(url)
        self._prefix = prefix

    def submit(self, model_name, inputs, outputs=None, job_id=None, model_version="",
               priority=0, timeout_us=None, parameters=None):
        """Queues one job; returns its id (a new UUID unless given)."""
        job_id = job_id or uuid.uuid4().hex
        head, raws = _infer_body(inputs, outputs, "", 0, False, False, 0, None, parameters)
        fields = {"id": job_id}
        if raws:
            fields["header"] = head
            fields["binary"] = b"".join(raws)
        else:
            fields["request"] = head
        if model_version:
            fields["version"] = str(model_version)
        if priority:
            fields["priority"] = str(int(priority))
        if timeout_us is not None:
            fields["timeout_us"] = str(int(timeout_us))
        self._r.xadd(f"{self._prefix}:jobs:{model_name}", fields)
        return job_id

    @staticmethod
    def _parse(raw):
        head, _, tail = raw.partition(b"\n")
        res = json.loads(head)
        if res.get("status") != "ok":
            raise InferenceServerException(msg=res.get("error", "the job failed"),
                                           status=res.get("code"))
        return InferResult(res, tail)

    def result(self, job_id):
        """The job's InferResult if it has finished, None if not yet; raises
        InferenceServerException for an error result."""
        raw = self._r.get(f"results:{job_id}")
        return None if raw is None else self._parse(raw)

    def raw_result(self, job_id):
        """The stored result as a dict (status, error, times, worker ...),
        or None."""
        raw = self._r.get(f"results:{job_id}")
        return None if raw is None else json.loads(raw.partition(b"\n")[0])

    def wait(self, job_id, timeout=None, poll_min_s=0.002, poll_max_s=0.1):
        """Polls until the result is there (back-off from poll_min_s to
        poll_max_s); raises InferenceServerException on an error result or
        when `timeout` seconds pass."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = poll_min_s
        while True:
            raw = self._r.get(f"results:{job_id}")
            if raw is not None:
                return self._parse(raw)
            if deadline is not None and time.monotonic() >= deadline:
                raise InferenceServerException(msg=f"job {job_id}: no result after {timeout} s",
                                               status="DEADLINE_EXCEEDED")
            time.sleep(delay)
            delay = min(delay * 2, poll_max_s)

    def infer(self, model_name, inputs, outputs=None, timeout=None, **kw):
        """submit() then wait()."""
        return self.wait(self.submit(model_name, inputs, outputs, **kw), timeout=timeout)

    def dead_letters(self, model_name, count=100):
        """The model's dead-letter entries: [(entry id, {field: value})]."""
        return [(i.decode(), {k.decode(): v for k, v in f.items()})
                for i, f in self._r.xrange(f"{self._prefix}:dead:{model_name}", count=count)]
