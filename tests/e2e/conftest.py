"""Shared fixtures for the end-to-end tests (run: /usr/bin/python3 -m pytest tests/e2e)."""

import os
import pathlib

import pytest


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    return pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cache_dir(repo_root) -> pathlib.Path:
    """$INFD_CACHE (default <repo>/.cache); skips the test when it is missing."""
    cache = pathlib.Path(os.environ.get("INFD_CACHE") or repo_root / ".cache")
    if not cache.is_dir():
        pytest.skip(f"model cache {cache} not found: run scripts/fetch_npm.sh and "
                    "/usr/bin/python3 scripts/gen_models.py (or set INFD_CACHE)")
    return cache


@pytest.fixture(scope="session")
def infd_bin(repo_root) -> pathlib.Path:
    """The `infd` binary under test: $INFD_BIN, default build/release/infd."""
    path = pathlib.Path(os.environ.get("INFD_BIN") or repo_root / "build" / "release" / "infd")
    if not path.is_file():
        pytest.fail(f"infd binary {path} not found: run 'make build' (or set INFD_BIN)")
    return path


@pytest.fixture
def serve(infd_bin):
    """Factory: serve(repo, *extra_args, **kw) starts `infd serve` on free
    127.0.0.1 ports (see serving.Server) and waits until it is ready. At
    teardown every server the test did not kill() is stopped with SIGTERM and
    must exit with its expected_returncode (0 unless the test changed it)."""
    from serving import Server, stop_all

    servers = []

    def start(repo, *extra_args, **kw):
        srv = Server(infd_bin, repo, *extra_args, **kw)
        servers.append(srv)
        return srv

    yield start
    problems = stop_all(servers)
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


@pytest.fixture
def add_sub_repo(tmp_path) -> pathlib.Path:
    """A repository of Triton's add_sub model alone (tmp_path/models)."""
    import repo as model_repo

    models = tmp_path / "models"
    model_repo.add_sub(models)
    return models
