"""The optional extras: which modules each brings, and how to install one.

A module an extra brings that is missing is reported as that extra, with
the command that installs it, by the Python API (`needs_extra`) and the
`taskloom` command alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

EXTRAS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "cli": ("the taskloom command", ("rich",)),
    "postgres": ("PostgreSQL stores", ("psycopg", "psycopg_pool")),
    "otel": ("OpenTelemetry tracing", ("opentelemetry",)),
    "web": ("the web console", ("starlette", "uvicorn", "jinja2")),
    # mcp_types comes with the SDK as a distribution of its own.
    "mcp": ("MCP servers and taskloom mcp serve", ("mcp", "mcp_types")),
    "distributed": ("the work queue", ("procrastinate",)),
    "temporal": ("the Temporal engine", ("temporalio", "croniter")),
    # httpx comes with the SDK (its client is built on it, and the remote
    # agent imports it first); taskloom's own HTTP is httpx2, in the core.
    "a2a": ("A2A serving and remote A2A subagents", ("a2a", "httpx")),
    "prices": ("dollar ceilings priced from the genai-prices table", ("genai_prices",)),
    "embeddings": (
        "semantic memory search with a sentence-transformers model",
        ("sentence_transformers",),
    ),
    # pytest's distribution brings _pytest and py beside pytest.
    "testing": (
        "the contract suites of taskloom.testing",
        ("pytest", "_pytest", "py", "pytest_asyncio"),
    ),
}
"""Each extra of pyproject.toml: what it is for, and the top-level modules of
its requirements (and of their requirements whose names differ)."""


def install_command(extra: str) -> str:
    """How to install `extra` into the environment taskloom is installed in.

    The same command for a wheel and a clone's editable install: pip keeps
    the taskloom already installed and adds only the extra's requirements."""
    return f"pip install 'taskloom[{extra}]'"


def extra_providing(module: str) -> str | None:
    """The extra that brings `module` (`psycopg.pq` counts as `psycopg`), or None."""
    top = module.partition(".")[0]
    for extra, (_, modules) in EXTRAS.items():
        if top in modules:
            return extra
    return None


@contextmanager
def needs_extra(what: str) -> Iterator[None]:
    """Inside, an import that fails for a module an extra brings raises a
    `ModuleNotFoundError` naming `what` needs that extra and how to install
    it (the module's name is kept in `.name`); other errors pass unchanged."""
    try:
        yield
    except ModuleNotFoundError as exc:
        extra = extra_providing(exc.name or "")
        if extra is None:
            raise
        raise ModuleNotFoundError(
            f"{what} needs the {extra} extra (no module named {exc.name!r}): {install_command(extra)}",
            name=exc.name,
            path=exc.path,
        ) from exc
