"""A worker's fetch that meets a dropped connection finds no job this time and
keeps the worker fetching, without sending the fetch again; other errors raise."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from procrastinate import exceptions

from taskloom.distributed._jobs import FencedJobManager


class FailingConnector:
    """A connector whose every query fails with `cause`, counting the queries sent."""

    def __init__(self, cause: Exception) -> None:
        self.cause = cause
        self.sent = 0

    async def execute_query_one_async(self, query: str, **arguments: Any) -> Any:
        self.sent += 1
        raise exceptions.ConnectorException() from self.cause


async def test_a_dropped_connection_is_no_job_this_time_and_is_not_fetched_again() -> None:
    connector = FailingConnector(psycopg.OperationalError("server closed the connection"))
    manager = FencedJobManager(connector)  # type: ignore[arg-type]
    assert await manager.fetch_job(["runs"], worker_id=1) is None
    assert connector.sent == 1


async def test_any_other_failure_of_a_fetch_still_raises() -> None:
    connector = FailingConnector(psycopg.errors.UndefinedTable("no procrastinate_jobs"))
    manager = FencedJobManager(connector)  # type: ignore[arg-type]
    with pytest.raises(exceptions.ConnectorException):
        await manager.fetch_job(["runs"], worker_id=1)
