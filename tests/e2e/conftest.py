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
