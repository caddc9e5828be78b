#!/usr/bin/env python3
"""What one ensemble step costs, without the step's own work: chains of 1,
2, 4 and 8 steps of a cheap processor (the built-in `softmax` over 16
values), against that processor served alone, on one `infd serve`, in one
run, by `infd perf` over HTTP with binary tensors at concurrency 1 (where
queueing hides nothing).

  * per-step cost: the slope of p50 over the number of steps (least
    squares), so the HTTP round trip and the ensemble's own request, paid
    once, drop out (the issue's goal: <= 20 us added per step);
  * the same for a python-backend identity step (`backend: "python"`), and
    the python step alone, to show what the embedded interpreter adds.

Usage: python3 bench/ensemble_steps.py [--measurement-ms 3000]
"""

import argparse
import json
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from serve_common import DEFAULT_INFD, Serve, perf_row, run_perf  # noqa: E402

C = 16
STEPS = (1, 2, 4, 8)

SOFTMAX = ('name: "sm"\nbackend: "softmax"\nmax_batch_size: 8\n'
           f'parameters {{ key: "classes" value {{ string_value: "{C}" }} }}\n'
           "dynamic_batching { max_queue_delay_microseconds: 0 }\n"
           "instance_group [ { count: 1 kind: KIND_CPU } ]\n")

PY_IDENTITY_CFG = (
    'name: "py"\nbackend: "python"\nmax_batch_size: 8\n'
    f'input [ {{ name: "LOGITS" data_type: TYPE_FP32 dims: [ {C} ] }} ]\n'
    f'output [ {{ name: "PROBS" data_type: TYPE_FP32 dims: [ {C} ] }} ]\n'
    "dynamic_batching { max_queue_delay_microseconds: 0 }\n"
    "instance_group [ { count: 1 kind: KIND_CPU } ]\n")

PY_IDENTITY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("PROBS", pb_utils.get_input_tensor_by_name(r, "LOGITS").as_numpy())])
            for r in requests]
'''


def chain(name, step_model, n):
    steps = []
    for s in range(n):
        src = "IN" if s == 0 else f"t{s}"
        dst = "OUT" if s == n - 1 else f"t{s + 1}"
        steps.append(f'{{ model_name: "{step_model}" model_version: -1 '
                     f'input_map {{ key: "LOGITS" value: "{src}" }} '
                     f'output_map {{ key: "PROBS" value: "{dst}" }} }}')
    return (f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n'
            f'input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ {C} ] }} ]\n'
            f'output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ {C} ] }} ]\n'
            "ensemble_scheduling { step [\n  " + ",\n  ".join(steps) + " ] }\n")


def slope(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--infd", default=str(DEFAULT_INFD))
    ap.add_argument("--measurement-ms", type=int, default=3000)
    ap.add_argument("--json")
    args = ap.parse_args()
    out = {}
    with tempfile.TemporaryDirectory(prefix="infd-steps-") as tmp:
        repo = pathlib.Path(tmp) / "repo"
        models = {"sm": SOFTMAX, "py": PY_IDENTITY_CFG}
        for kind in ("sm", "py"):
            for n in STEPS:
                models[f"{kind}{n}"] = chain(f"{kind}{n}", kind, n)
        for name, text in models.items():
            (repo / name / "1").mkdir(parents=True)
            (repo / name / "config.pbtxt").write_text(text)
        (repo / "py" / "1" / "model.py").write_text(PY_IDENTITY)
        with Serve(args.infd, repo, tmp) as srv:
            for name in models:
                row = perf_row(run_perf(args.infd, [
                    "--model", name, "--url", srv.hostport, "--binary",
                    "--concurrency-range", "1:1:1", "--measurement-ms", args.measurement_ms],
                    pathlib.Path(tmp) / f"{name}.csv")[0])
                out[name] = row
                print(f"{name:4s}: {row['throughput']:8.1f} infer/s, p50 {row['p50_us']:7.1f} us, "
                      f"p99 {row['p99_us']:7.1f} us", flush=True)
    for kind, what in (("sm", "softmax (C)"), ("py", "python identity")):
        per = slope(list(STEPS), [out[f"{kind}{n}"]["p50_us"] for n in STEPS])
        out[f"{kind}_us_per_step"] = per
        print(f"{what}: {per:.1f} us per ensemble step (slope of p50 over 1, 2, 4, 8 steps); "
              f"alone p50 {out[kind]['p50_us']:.1f} us, in a 1-step ensemble "
              f"{out[kind + '1']['p50_us']:.1f} us")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
