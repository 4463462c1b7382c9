"""Fixtures several unit test modules share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(params=["sqlite", "postgres"])
def replica_db(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """Where `shou serve` replicas' database is (tests/fixtures/replicas.py): a SQLite file (None), or a
    PostgreSQL cluster of the test's own."""
    if request.param == "sqlite":
        yield None
        return
    from ..fixtures.postgres import start_postgres

    server = start_postgres()
    try:
        yield server.database("replicas")
    finally:
        server.stop()
