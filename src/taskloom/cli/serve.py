"""`taskloom serve`: the web console over a store, on loopback by default.

Without `--app` the console is read-only: the store is data, and taskloom
never loads code a session names; the store must exist (it is not created). With `--app module:factory` it acts
through the host's runtime (the same factory `resume` and workers use).
The access token is printed at start (or comes from `--token` /
`TASKLOOM_CONSOLE_TOKEN`, and is then not printed).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._extras import install_command
from .._serving import is_loopback, listen
from ..errors import ConfigurationError, UsageError
from . import default_store_url
from .common import Serve, load_app, store_runtime
from .failures import with_hint
from .parser import CONSOLE_TOKEN

if TYPE_CHECKING:
    from ..backends import SessionStore
    from ..runtime import Runtime

__all__ = ["serve_console"]


def _same_store(store: SessionStore, url: str) -> bool:
    from ..backends import open_backend

    other: Any = open_backend(url).store
    mine: Any = store
    path, other_path = getattr(mine, "path", None), getattr(other, "path", None)
    if path is not None or other_path is not None:
        return (
            path is not None
            and other_path is not None
            and Path(path).resolve() == Path(other_path).resolve()
        )
    # A PostgreSQL store is named by its database's address and schema.
    mine, other = getattr(mine, "database", mine), getattr(other, "database", other)
    address: str | None = getattr(mine, "url", None)
    same_schema = getattr(mine, "schema", None) == getattr(other, "schema", None)
    return address is not None and address == getattr(other, "url", None) and same_schema


async def _runtime(args: Serve) -> tuple[Runtime, bool]:
    app, store = args.where.app, args.where.store
    if app:
        runtime = await load_app(app)
        if store and not _same_store(runtime.store, store):
            await runtime.close()
            raise with_hint(
                UsageError(f"--app {app} brings a store other than --store {store}"),
                "drop --store (the app's Runtime brings its store), or make them the same",
            )
        return runtime, True
    url = store or default_store_url()
    # Read-only: the console never makes a store to show.
    runtime = store_runtime(url, create=False)
    try:
        await runtime.store.list(limit=1)  # a missing store is said now, not per page
    except BaseException:
        await runtime.close()
        raise
    return runtime, False


async def _serve(args: Serve) -> int:
    try:
        import uvicorn

        from ..console import Console
    except ImportError as exc:
        raise with_hint(
            ConfigurationError(f"the console needs the web extra (no module named {exc.name!r})"),
            install_command("web"),
        ) from exc
    token = args.token or os.environ.get(CONSOLE_TOKEN) or None
    runtime, can_act = await _runtime(args)
    try:
        console = Console(runtime, can_act=can_act, token=token, max_body=args.max_body)
        try:
            sock, _ = listen(args.host.strip("[]"), args.port, console.token)
        except ConfigurationError as exc:
            raise with_hint(exc, "pick another --port (0 takes any free one)") from None
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        if not is_loopback(host):
            print(
                f"taskloom: warning: serving on {host}, reachable from other machines; "
                "anyone with the token can read every session",
                file=sys.stderr,
            )
        mode = f"acting through {args.where.app}" if can_act else "read-only (no --app)"
        if token is None:
            where = f"http://{shown}:{port}/?token={console.token}"
        else:
            where = f"http://{shown}:{port}/ (add ?token= with your token, once)"
        print(f"taskloom console, {mode}: {where}", flush=True)
        config = uvicorn.Config(
            console, log_level="warning", lifespan="on", timeout_graceful_shutdown=2
        )
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        await runtime.close()
    return 0


def serve_console(args: Serve) -> int:
    """Run the console until interrupted; returns the exit code."""
    return asyncio.run(_serve(args))
