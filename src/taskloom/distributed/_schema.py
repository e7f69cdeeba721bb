"""The queue's tables: procrastinate's schema plus taskloom's own, as versioned migrations.

Applied like every taskloom table (`PostgresDatabase.require`, component
`"queue"`), on first use or by `taskloom db migrate URL`; with a schema the
migration and every queue connection set the search path (procrastinate's
objects are unqualified). taskloom adds a trigger that NOTIFYs
`taskloom_jobs` when a job's status changes (`Session.wait`), the log
position where each job started its run and whether a drain cut it, and the
schedules of scheduled wake-ups.
"""

from __future__ import annotations

import functools
from pathlib import Path

from ..backends.postgres import Migration, quote_ident
from ..errors import ConfigurationError

__all__ = ["JOBS_CHANNEL", "KNOWN_PROCRASTINATE_MIGRATION", "queue_migrations", "search_path"]

JOBS_CHANNEL = "taskloom_jobs"
"""The channel a job's status change is announced on (payload: schema, lock, status)."""

KNOWN_PROCRASTINATE_MIGRATION = "03.04.00_50_post_add_retry_failed_job_procedure.sql"
"""The last migration of procrastinate's schema that migration 1 was written for
(a procrastinate past it needs a new migration here)."""


def search_path(schema: str | None, url: str = "") -> str | None:
    """The libpq `options` that put a connection's unqualified names in `schema`
    (after any `options` the URL itself gives, which they must not drop)."""
    if schema is None:
        return None
    from psycopg.conninfo import conninfo_to_dict

    given = conninfo_to_dict(url).get("options") if url else None
    # libpq splits options at spaces unless a backslash escapes them.
    quoted = quote_ident(schema).replace("\\", "\\\\").replace(" ", "\\ ")
    ours = f"-c search_path={quoted}"
    return f"{given} {ours}" if given else ours


def _escaped(sql: str) -> str:
    # Migration statements are str.format-ed with table names.
    return sql.replace("{", "{{").replace("}", "}}")


@functools.cache
def _procrastinate_schema() -> str:
    from procrastinate.schema import SchemaManager

    latest = max(p.name for p in Path(SchemaManager.get_migrations_path()).glob("[0-9]*.sql"))
    if latest != KNOWN_PROCRASTINATE_MIGRATION:
        raise ConfigurationError(
            f"the installed procrastinate's schema goes up to migration {latest}, but this "
            f"taskloom knows it up to {KNOWN_PROCRASTINATE_MIGRATION}: install the "
            "procrastinate version the distributed extra pins, or upgrade taskloom"
        )
    return SchemaManager.get_schema()


def queue_migrations(schema: str | None) -> tuple[Migration, ...]:
    """The queue's migrations for a database whose taskloom tables live in `schema`."""
    literal = (schema or "").replace("'", "''")
    setpath = (f"SET LOCAL search_path TO {_escaped(quote_ident(schema))}",) if schema else ()
    return (
        (
            *setpath,
            _escaped(_procrastinate_schema()),
            _escaped(
                f"""CREATE FUNCTION taskloom_notify_job_status() RETURNS trigger
                LANGUAGE plpgsql AS $$
                BEGIN
                    PERFORM pg_notify('{JOBS_CHANNEL}', json_build_object(
                        'schema', '{literal}', 'lock', NEW.lock, 'status', NEW.status
                    )::text);
                    RETURN NEW;
                END;
                $$"""
            ),
            """CREATE TRIGGER taskloom_job_status AFTER UPDATE OF status ON procrastinate_jobs
            FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
            EXECUTE FUNCTION taskloom_notify_job_status()""",
            """CREATE TABLE {queue_runs} (
                job_id bigint PRIMARY KEY,
                session_id text NOT NULL,
                position bigint NOT NULL,
                drained boolean NOT NULL DEFAULT false
            )""",
            """CREATE TABLE {queue_schedules} (
                id text PRIMARY KEY,
                session_id text NOT NULL,
                every_seconds double precision,
                cron text,
                input text,
                next_at timestamptz NOT NULL,
                created_at timestamptz NOT NULL DEFAULT now()
            )""",
            "CREATE INDEX taskloom_queue_schedules_session ON {queue_schedules} (session_id)",
        ),
    )
