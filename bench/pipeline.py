#!/usr/bin/env python3
"""What an ensemble costs: a 3-step pipeline against its slowest step alone,
on one `infd serve`, in one run.

The pipeline (platform "ensemble"): a pre-processing plugin (tests/plugins'
`scale` over the 128x128x3 image) -> BlazeFace front (ONNX) -> a
post-processing plugin (`scale` over BlazeFace's 512 scores). BlazeFace is
the slowest step by far; the plugins are a multiply each. Both are driven
by `infd perf` over HTTP with binary tensors, at the same concurrency:

  * throughput ratio: pipeline / BlazeFace alone (the issue's goal: >= 0.9);
  * added latency per step: (pipeline p50 - BlazeFace p50) / 3 (goal: <= 20 us),
    measured at concurrency 1, where queueing does not hide it.

Usage: python3 bench/pipeline.py [--concurrency 8] [--measurement-ms 5000]
The decode -> BlazeFace -> decode-faces pipeline of the issue needs the
built-in image and BlazeFace processors, which are not built yet; this one
has the same shape (a cheap step, the model, a cheap step).
"""

import argparse
import json
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from serve_common import DEFAULT_INFD, ROOT, Serve, perf_row, run_perf  # noqa: E402


def plugin_cfg(name, lib, rank):
    return (f'name: "{name}"\nbackend: "plugin"\nmax_batch_size: 8\n'
            f'parameters {{ key: "library" value {{ string_value: "{lib}" }} }}\n'
            'parameters { key: "op" value { string_value: "scale" } }\n'
            'parameters { key: "factor" value { string_value: "1" } }\n'
            f'parameters {{ key: "rank" value {{ string_value: "{rank}" }} }}\n'
            "dynamic_batching { max_queue_delay_microseconds: 0 }\n"
            "instance_group [ { count: 1 kind: KIND_CPU } ]\n")


PIPE = """name: "pipe"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_FP32 dims: [ 128, 128, 3 ] } ]
output [ { name: "SCORES" data_type: TYPE_FP32 dims: [ 512, 1 ] } ]
ensemble_scheduling { step [
  { model_name: "pre" model_version: -1
    input_map { key: "X" value: "IMAGE" } output_map { key: "Y" value: "pixels" } },
  { model_name: "blazeface" model_version: -1
    input_map { key: "input:0" value: "pixels" } output_map { key: "Identity:0" value: "raw" } },
  { model_name: "post" model_version: -1
    input_map { key: "X" value: "raw" } output_map { key: "Y" value: "SCORES" } } ] }
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--infd", default=str(DEFAULT_INFD))
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--measurement-ms", type=int, default=5000)
    ap.add_argument("--json")
    args = ap.parse_args()
    lib = pathlib.Path(args.infd).resolve().parent / "plugins" / "libinfd_test_plugin.so"
    if not lib.exists():
        sys.exit(f"{lib} missing: build the release preset with its tests")
    out = {}
    with tempfile.TemporaryDirectory(prefix="infd-pipe-") as tmp:
        repo = pathlib.Path(tmp) / "repo"
        for name, text in (("pre", plugin_cfg("pre", lib, 3)), ("post", plugin_cfg("post", lib, 2)),
                           ("pipe", PIPE)):
            (repo / name / "1").mkdir(parents=True)
            (repo / name / "config.pbtxt").write_text(text)
        bf = repo / "blazeface"
        (bf / "1").mkdir(parents=True)
        (bf / "1" / "model.onnx").symlink_to(ROOT / "models" / "blazeface" / "1" / "model.onnx")
        (bf / "config.pbtxt").write_text((ROOT / "models" / "blazeface" / "config.pbtxt")
                                         .read_text())
        with Serve(args.infd, repo, tmp) as srv:
            for conc in (1, args.concurrency):
                for model in ("blazeface", "pipe"):
                    row = perf_row(run_perf(args.infd, [
                        "--model", model, "--url", srv.hostport, "--binary",
                        "--concurrency-range", f"{conc}:{conc}:1",
                        "--measurement-ms", args.measurement_ms],
                        pathlib.Path(tmp) / f"{model}{conc}.csv")[0])
                    out[f"{model}@{conc}"] = row
                    print(f"{model:9s} concurrency {conc:2d}: {row['throughput']:8.1f} infer/s, "
                          f"p50 {row['p50_us']:8.1f} us, p99 {row['p99_us']:8.1f} us")
    c = args.concurrency
    ratio = out[f"pipe@{c}"]["throughput"] / out[f"blazeface@{c}"]["throughput"]
    per_step = (out["pipe@1"]["p50_us"] - out["blazeface@1"]["p50_us"]) / 3
    print(f"pipeline / BlazeFace alone at concurrency {c}: {ratio:.3f} of the throughput; "
          f"added per step at concurrency 1 (p50): {per_step:.1f} us")
    out["ratio"] = ratio
    out["added_us_per_step"] = per_step
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
