"""The Matrix tests' homeserver: one real Synapse per test session (per xdist worker), started
inside the loopback-only namespace the tests run in; each test registers users of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.matrix_server import PYTHON, Synapse


@pytest.fixture(scope="session")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synapse]:
    if not PYTHON:
        pytest.skip("set HERMES_TEST_SYNAPSE to a Python with matrix-synapse (CI does)")
    server = Synapse(Path(tmp_path_factory.mktemp("synapse"))).start()
    try:
        yield server
    finally:
        server.stop()
