"""The live tests' server: one llama.cpp server for the session.

The build comes from `build_server.sh` (`.ci/run` runs it before the tests).
Without a build the live tests skip, naming the script, except under CI,
where a missing build fails them. The server is ended at the end of the
session by the pid this fixture started.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from llama_server import LiveServer, build_dir, start_server


@pytest.fixture(scope="session")
def llama_build() -> Path:
    """The cached server build; skips (fails under CI) when there is none."""
    build = build_dir()
    if build is None:
        message = (
            "the llama.cpp server is not built: run tests/live/build_server.sh "
            "(minutes on an idle 2-core machine, far longer under load; the build is "
            "cached outside the checkout)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message + " — under CI, .ci/run builds it first", pytrace=False)
        pytest.skip(message)
    return build


@pytest.fixture(scope="session")
def llama_server(
    llama_build: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """One server for the session's live tests."""
    server = start_server(llama_build, tmp_path_factory.mktemp("llama") / "server.log")
    try:
        yield server
    finally:
        server.stop()
