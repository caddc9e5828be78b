"""`infd serve` with instance groups on GPUs (issue #6): KIND_GPU, KIND_AUTO
and KIND_CPU from config.pbtxt.

Everywhere (CI, machines without a GPU): a KIND_GPU model is UNAVAILABLE
with "instance_group[0]: KIND_GPU, but no usable CUDA device: <reason>" in
the repository index while the other models of the repository serve;
KIND_AUTO (and a config without instance_group) resolves to KIND_CPU and
serves; malformed `gpus` name the config file and field.

With a usable CUDA device (the H100): BlazeFace copied from models/blazeface
with `instance_group [ { kind: KIND_GPU count: 2 } ]` answers HTTP binary
requests like a KIND_CPU copy (max |gpu - cpu| <= 1e-3 * max |cpu|, FP32 on
both), concurrent clients are batched (batch_stats), and
/v2/models/<m>/config reports KIND_GPU with its gpus. Without one these
skip, saying why (`infd --version`'s cuda backend line, as test_cuda.py).
"""

import concurrent.futures
import re
import shutil

import numpy as np
import pytest
import requests

import repo as model_repo
from test_cuda import cuda_state
from test_http import binary_outputs, binary_request

TIMEOUT = 120  # seconds one HTTP call may take (GPU plan builds tune cuDNN)
REL_TOL = 1e-3
BLAZEFACE_OUTPUTS = ["Identity:0", "Identity_1:0", "Identity_2:0", "Identity_3:0"]
NO_GPU_MSG = "instance_group[0]: KIND_GPU, but no usable CUDA device: "


@pytest.fixture(scope="module")
def cuda(infd_bin):
    """(usable, `infd --version` cuda line)."""
    return cuda_state(infd_bin)


@pytest.fixture
def gpu(cuda):
    usable, line = cuda
    if not usable:
        pytest.skip(f"no usable CUDA device (infd --version: cuda backend: {line})")
    return line


@pytest.fixture
def no_gpu(cuda):
    usable, line = cuda
    if usable:
        pytest.skip(f"a CUDA device is usable ({line}): the no-GPU refusal is not reachable")
    return line


def group_text(kind, count=1, gpus=None):
    g = f"  {{\n    count: {count}\n    kind: {kind}\n"
    if gpus is not None:
        g += f"    gpus: [ {', '.join(str(x) for x in gpus)} ]\n"
    return "instance_group [\n" + g + "  }\n]\n"


def add_sub(repo, name, group):
    """add_sub (dynamic batching) with `group` as its instance_group text
    ("" leaves instance_group out)."""
    text = model_repo.add_sub_config(name, dynamic_batching={"max_queue_delay_microseconds": 2000})
    text = re.sub(r"instance_group \[.*?\n\]\n", group, text, flags=re.S)
    model_repo.add_sub(repo, name, config=text)


def blazeface(repo, repo_root, name, group):
    """models/blazeface (batching, max_batch_size 8) as <repo>/<name> with
    `group` as its instance_group and a long queue delay, so concurrent
    clients batch."""
    src = repo_root / "models" / "blazeface"
    if not (src / "1" / "model.onnx").exists():
        pytest.skip(f"{src}/1/model.onnx not found (run scripts/setup.sh)")
    dst = repo / name
    (dst / "1").mkdir(parents=True)
    shutil.copy(src / "1" / "model.onnx", dst / "1" / "model.onnx")
    text = (src / "config.pbtxt").read_text()
    text = text.replace('name: "blazeface"', f'name: "{name}"')
    text = re.sub(r"instance_group \[.*?\n\]\n?", group, text, flags=re.S)
    text = re.sub(r"max_queue_delay_microseconds: \d+", "max_queue_delay_microseconds: 20000", text)
    (dst / "config.pbtxt").write_text(text)


def index(srv):
    r = requests.post(srv.url + "/v2/repository/index", timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    return {x["name"]: x for x in r.json()}


def config(srv, model):
    r = requests.get(f"{srv.url}/v2/models/{model}/config", timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    return r.json()


def infer_add_sub(srv, model, rows=2):
    a = np.arange(rows * 16, dtype=np.float32).reshape(rows, 16)
    b = np.full((rows, 16), 3.0, np.float32)
    body, headers = binary_request([("INPUT0", "FP32", a), ("INPUT1", "FP32", b)],
                                   outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                                            {"name": "OUTPUT1", "parameters": {"binary_data": True}}])
    r = requests.post(f"{srv.url}/v2/models/{model}/infer", data=body, headers=headers,
                      timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    _, out = binary_outputs(r)
    assert np.array_equal(np.frombuffer(out["OUTPUT0"], np.float32).reshape(rows, 16), a + b)
    assert np.array_equal(np.frombuffer(out["OUTPUT1"], np.float32).reshape(rows, 16), a - b)


def infer_blazeface(srv, model, image, session=None):
    """{output: array} of one binary request."""
    body, headers = binary_request(
        [("input:0", "FP32", image)],
        outputs=[{"name": n, "parameters": {"binary_data": True}} for n in BLAZEFACE_OUTPUTS])
    r = (session or requests).post(f"{srv.url}/v2/models/{model}/infer", data=body,
                                   headers=headers, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    hdr, out = binary_outputs(r)
    shapes = {o["name"]: o["shape"] for o in hdr["outputs"]}
    return {n: np.frombuffer(out[n], np.float32).reshape(shapes[n]) for n in BLAZEFACE_OUTPUTS}


def assert_close(gpu_out, cpu_out, what):
    for n in BLAZEFACE_OUTPUTS:
        g, c = gpu_out[n], cpu_out[n]
        assert g.shape == c.shape, (what, n, g.shape, c.shape)
        err = float(np.max(np.abs(g - c)))
        scale = float(np.max(np.abs(c)))
        print(f"{what} {n}: max |gpu - cpu| = {err:.3g} (max |cpu| {scale:.3g})")
        assert err <= REL_TOL * scale, (what, n, err, scale)


def groups_of(cfg):
    return [(g["kind"], g.get("count"), g.get("gpus", [])) for g in cfg["instance_group"]]


# -- everywhere ----------------------------------------------------------------


def test_kind_gpu_without_gpu_is_unavailable(serve, tmp_path, no_gpu):
    """KIND_GPU on a machine without a usable GPU: that model is UNAVAILABLE
    with the reason; the others (KIND_CPU, KIND_AUTO, no instance_group)
    serve, before and after asking for it."""
    repo = tmp_path / "repo"
    add_sub(repo, "on_cpu", group_text("KIND_CPU"))
    add_sub(repo, "on_gpu", group_text("KIND_GPU", count=2))
    add_sub(repo, "auto_kind", group_text("KIND_AUTO"))
    add_sub(repo, "no_group", "")
    srv = serve(repo)
    rows = index(srv)
    assert rows["on_gpu"]["state"] == "UNAVAILABLE", rows["on_gpu"]
    assert NO_GPU_MSG in rows["on_gpu"]["reason"], rows["on_gpu"]
    assert "config.pbtxt" in rows["on_gpu"]["reason"]
    r = requests.get(srv.url + "/v2/models/on_gpu/ready", timeout=TIMEOUT)
    assert r.status_code != 200
    r = requests.post(srv.url + "/v2/models/on_gpu/infer", json={"inputs": []}, timeout=TIMEOUT)
    assert r.status_code != 200 and "KIND_GPU" in r.text, r.text
    for model in ("on_cpu", "auto_kind", "no_group"):
        assert rows[model]["state"] == "READY", rows[model]
        infer_add_sub(srv, model)
    # KIND_AUTO resolves to KIND_CPU, as Triton does without a GPU, and the
    # config says so; a config without instance_group gets one such group.
    assert groups_of(config(srv, "auto_kind")) == [("KIND_CPU", 1, [])]
    assert groups_of(config(srv, "no_group")) == [("KIND_CPU", 1, [])]
    assert config(srv, "no_group")["instance_group"][0]["name"] == "no_group_0"
    assert "KIND_AUTO is KIND_CPU (no usable CUDA device" in srv.log()


def test_bad_gpus_are_config_errors(serve, tmp_path):
    """Negative or repeated GPU ids, and gpus on KIND_CPU, fail that model
    with the file and field; the server keeps serving the others."""
    repo = tmp_path / "repo"
    add_sub(repo, "good", group_text("KIND_CPU"))
    add_sub(repo, "neg", group_text("KIND_GPU", gpus=[-1]))
    add_sub(repo, "dup", group_text("KIND_GPU", gpus=[0, 0]))
    add_sub(repo, "cpu_gpus", group_text("KIND_CPU", gpus=[0]))
    srv = serve(repo)
    rows = index(srv)
    expect = {"neg": "instance_group[0].gpus[0] is -1; GPU ids start at 0",
              "dup": "instance_group[0].gpus lists GPU 0 twice",
              "cpu_gpus": "instance_group[0]: KIND_CPU with gpus"}
    for model, msg in expect.items():
        assert rows[model]["state"] == "UNAVAILABLE", rows[model]
        assert msg in rows[model]["reason"], rows[model]
        assert f"{model}/config.pbtxt" in rows[model]["reason"], rows[model]
    infer_add_sub(srv, "good")


def test_auto_kind_in_config(serve, tmp_path, cuda):
    """/v2/models/<m>/config reports KIND_AUTO resolved: KIND_GPU with every
    GPU listed when a CUDA device is usable, else KIND_CPU."""
    usable, _ = cuda
    repo = tmp_path / "repo"
    add_sub(repo, "auto_kind", group_text("KIND_AUTO", count=2))
    srv = serve(repo)
    infer_add_sub(srv, "auto_kind", rows=3)
    [(kind, count, gpus)] = groups_of(config(srv, "auto_kind"))
    assert count == 2
    if usable:
        assert kind == "KIND_GPU" and gpus and gpus[0] == 0, (kind, gpus)
    else:
        assert (kind, gpus) == ("KIND_CPU", [])


# -- with a GPU ----------------------------------------------------------------


@pytest.fixture
def blazeface_srv(serve, tmp_path, repo_root, gpu):
    repo = tmp_path / "repo"
    repo.mkdir()
    blazeface(repo, repo_root, "bf_gpu", group_text("KIND_GPU", count=2, gpus=[0]))
    blazeface(repo, repo_root, "bf_cpu", group_text("KIND_CPU"))
    srv = serve(repo)
    rows = index(srv)
    for model in ("bf_gpu", "bf_cpu"):
        assert rows[model]["state"] == "READY", rows[model]
    return srv


def test_blazeface_gpu_matches_cpu(blazeface_srv):
    """HTTP binary requests of 1 and 4 images: KIND_GPU answers like KIND_CPU."""
    srv = blazeface_srv
    for batch, seed in ((1, 1), (4, 2), (3, 3)):
        image = np.random.default_rng(seed).uniform(-1, 1, (batch, 128, 128, 3)).astype(np.float32)
        assert_close(infer_blazeface(srv, "bf_gpu", image), infer_blazeface(srv, "bf_cpu", image),
                     f"batch {batch}")
    assert groups_of(config(srv, "bf_gpu")) == [("KIND_GPU", 2, [0])]
    assert groups_of(config(srv, "bf_cpu")) == [("KIND_CPU", 1, [])]


def test_blazeface_gpu_batches_concurrent_clients(blazeface_srv):
    """16 concurrent clients of one image each: every answer matches its own
    image's CPU answer, and the GPU instances ran batches of 2 or more."""
    srv = blazeface_srv
    n_clients, per_client = 16, 3
    images = [np.random.default_rng(100 + i).uniform(-1, 1, (1, 128, 128, 3)).astype(np.float32)
              for i in range(n_clients * per_client)]
    want = [infer_blazeface(srv, "bf_cpu", im) for im in images[:n_clients]]

    def client(c):
        s = requests.Session()
        for i in range(per_client):
            k = c * per_client + i
            got = infer_blazeface(srv, "bf_gpu", images[k], session=s)
            if k < n_clients:
                assert_close(got, want[k], f"client {c} request {i}")

    with concurrent.futures.ThreadPoolExecutor(n_clients) as ex:
        list(ex.map(client, range(n_clients)))
    st = requests.get(srv.url + "/v2/models/bf_gpu/stats", timeout=TIMEOUT).json()
    s = st["model_stats"][0]
    sizes = {b["batch_size"]: b["compute_infer"]["count"] for b in s["batch_stats"]}
    print("bf_gpu batch sizes:", sizes)
    assert s["inference_count"] == n_clients * per_client
    assert max(sizes) > 1, sizes
    assert s["execution_count"] < n_clients * per_client


PINNED_LINE = re.compile(r"model 'bf_gpu' instance \d+: input 'input:0' of a batch of (\d+) "
                         r"copied to the device from (\d+) pieces, in pinned request memory")


@pytest.mark.parametrize("pool", ["default", "none"])
def test_bodies_received_into_pinned_memory(serve, tmp_path, repo_root, gpu, pool):
    """Request bodies land in the pinned memory pool and reach the GPU from
    there: 8 keep-alive clients x 6 requests of one image each (196 KB
    bodies; a connection's body after its first lies whole in its slab), in
    requests whose JSON headers differ in length (the binary part starts at
    different offsets). Every answer matches its own image's CPU answer;
    with the pool, the server log shows a batch copied from pinned request
    memory; with `--pinned-memory-pool-byte-size 0` answers are the same
    and no such line appears."""
    repo = tmp_path / "repo"
    repo.mkdir()
    blazeface(repo, repo_root, "bf_gpu", group_text("KIND_GPU", count=2, gpus=[0]))
    blazeface(repo, repo_root, "bf_cpu", group_text("KIND_CPU"))
    args = ["--log-level", "debug"]
    if pool == "none":
        args += ["--pinned-memory-pool-byte-size", "0"]
    srv = serve(repo, *args)
    n_clients, per_client = 8, 6
    images = [np.random.default_rng(300 + i).uniform(-1, 1, (1, 128, 128, 3)).astype(np.float32)
              for i in range(n_clients * per_client)]
    want = [infer_blazeface(srv, "bf_cpu", im) for im in images]

    def client(c):
        s = requests.Session()
        for i in range(per_client):
            k = c * per_client + i
            body, headers = binary_request(
                [("input:0", "FP32", images[k])],
                outputs=[{"name": n, "parameters": {"binary_data": True}}
                         for n in BLAZEFACE_OUTPUTS],
                id="r" * (1 + 20 * i))
            r = s.post(f"{srv.url}/v2/models/bf_gpu/infer", data=body, headers=headers,
                       timeout=TIMEOUT)
            assert r.status_code == 200, r.text
            hdr, out = binary_outputs(r)
            shapes = {o["name"]: o["shape"] for o in hdr["outputs"]}
            got = {n: np.frombuffer(out[n], np.float32).reshape(shapes[n])
                   for n in BLAZEFACE_OUTPUTS}
            assert_close(got, want[k], f"client {c} request {i}")

    with concurrent.futures.ThreadPoolExecutor(n_clients) as ex:
        list(ex.map(client, range(n_clients)))
    lines = PINNED_LINE.findall(srv.log())
    print(f"pool {pool}: pinned batches logged: {lines}")
    if pool == "none":
        assert not lines
    else:
        assert "pinned memory pool: 1024 MiB" in srv.log()
        assert lines, "no batch was copied from pinned request memory"


def test_blazeface_on_every_gpu(serve, tmp_path, repo_root, cuda, gpu):
    """KIND_GPU without gpus: an instance on every GPU, each with plans
    compiled (cuDNN tuned) on its own GPU; concurrent clients reach them all
    and every answer matches the CPU. Needs 2 or more GPUs."""
    m = re.search(r"(\d+) GPU", cuda[1])
    n_gpus = int(m.group(1)) if m else 1
    if n_gpus < 2:
        pytest.skip(f"one GPU ({cuda[1]}): nothing past GPU 0 to place instances on")
    repo = tmp_path / "repo"
    repo.mkdir()
    blazeface(repo, repo_root, "bf_all", group_text("KIND_GPU"))
    blazeface(repo, repo_root, "bf_cpu", group_text("KIND_CPU"))
    srv = serve(repo)
    rows = index(srv)
    assert rows["bf_all"]["state"] == "READY", rows["bf_all"]
    assert groups_of(config(srv, "bf_all")) == [("KIND_GPU", 1, list(range(n_gpus)))]
    images = [np.random.default_rng(200 + i).uniform(-1, 1, (1, 128, 128, 3)).astype(np.float32)
              for i in range(4 * n_gpus)]
    want = [infer_blazeface(srv, "bf_cpu", im) for im in images]

    def client(k):
        assert_close(infer_blazeface(srv, "bf_all", images[k]), want[k], f"request {k}")

    with concurrent.futures.ThreadPoolExecutor(len(images)) as ex:
        list(ex.map(client, range(len(images))))


def test_gpu_past_the_last_is_refused(serve, tmp_path, gpu):
    """gpus naming a GPU that does not exist: that model is UNAVAILABLE
    saying how many there are; KIND_AUTO with it falls back to KIND_CPU."""
    repo = tmp_path / "repo"
    add_sub(repo, "far", group_text("KIND_GPU", gpus=[63]))
    add_sub(repo, "auto_far", group_text("KIND_AUTO", gpus=[63]))
    add_sub(repo, "near", group_text("KIND_GPU", gpus=[0]))
    srv = serve(repo)
    rows = index(srv)
    assert rows["far"]["state"] == "UNAVAILABLE", rows["far"]
    assert re.search(r"instance_group\[0\]: GPU 63 does not exist \(\d+ GPUs?\)",
                     rows["far"]["reason"]), rows["far"]
    infer_add_sub(srv, "auto_far")
    assert groups_of(config(srv, "auto_far")) == [("KIND_CPU", 1, [])]
    infer_add_sub(srv, "near", rows=5)
    assert groups_of(config(srv, "near")) == [("KIND_GPU", 1, [0])]
