"""`taskloom memory list|show|search|namespaces` as a user runs them: real
processes reading items that the public store API wrote, on SQLite and
PostgreSQL; stored text printed as data (spelled out, bounded); store URLs
printed without their credentials; bad input refused with exit code 2."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cli_process import taskloom_cli
from pg import PG_DSN, requires_postgres
from taskloom.backends import MAX_VALUE_BYTES, open_backend
from taskloom.cli import main
from taskloom.cli.memory import format_namespace, parse_namespace
from taskloom.errors import UsageError

ESCAPES = "\x1b[2J\x1b]0;pwned\x07"
"""Clear the screen, then retitle the terminal window."""

ITEMS: list[tuple[tuple[str, ...], str, Any]] = [
    (("user", "u1"), "tz", "Europe/Oslo"),
    (("user", "u1"), "prefs", {"drink": "flat white coffee", "sugar": False}),
    (("user", "a/b%c", "Tromsø"), "note", "likes coffee at noon"),
    (("agent", "planner"), "lessons", ["book early", "coffee is cheaper at the station"]),
]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=requires_postgres)])
def memory_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a durable store, as the CLI takes it: a SQLite file, or
    PostgreSQL with a private schema first on the search path."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'agents.db'}"
    schema = request.getfixturevalue("pg_schema")
    return f"{PG_DSN}?options=-csearch_path%3D{schema}"


def write(url: str, items: list[tuple[tuple[str, ...], str, Any]] = ITEMS) -> None:
    """Put `items` through the public store API of `url`."""

    async def put() -> None:
        backend = open_backend(url)
        try:
            for namespace, key, value in items:
                await backend.memory.put(namespace, key, value)  # type: ignore[union-attr]
        finally:
            await backend.close()

    asyncio.run(put())


def ok(*args: str, home: Path) -> str:
    done = taskloom_cli("memory", *args, home=home)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_commands_show_what_the_store_api_wrote(memory_url: str, tmp_path: Path) -> None:
    write(memory_url)
    store = ("--store", memory_url)

    listed = json.loads(ok("list", "--json", *store, home=tmp_path))
    assert [(tuple(i["namespace"]), i["key"], i["value"]) for i in listed] == sorted(
        ITEMS, key=lambda i: (i[0], i[1])
    )
    assert {i["version"] for i in listed} == {1}

    # The namespaces printed are written so they paste back into `show`.
    names = ok("namespaces", *store, home=tmp_path).splitlines()
    assert names == ["agent/planner", "user/a%2Fb%25c/Tromsø", "user/u1"]
    shown = ok("show", names[1], "note", *store, home=tmp_path)
    assert "likes coffee at noon" in shown
    assert "version    1" in shown
    assert json.loads(ok("show", "user/u1", "prefs", "--json", *store, home=tmp_path))["value"] == {
        "drink": "flat white coffee",
        "sugar": False,
    }

    table = ok("list", "user/u1", *store, home=tmp_path).splitlines()
    assert table[0].split() == ["NAMESPACE", "KEY", "VERSION", "UPDATED", "VALUE"]
    assert [row.split()[:3] for row in table[1:]] == [
        ["user/u1", "prefs", "1"],
        ["user/u1", "tz", "1"],
    ]

    hits = json.loads(ok("search", "user", "COFFEE", "--json", *store, home=tmp_path))
    assert sorted((tuple(h["namespace"]), h["key"]) for h in hits) == [
        (("user", "a/b%c", "Tromsø"), "note"),
        (("user", "u1"), "prefs"),
    ]
    assert all(h["score"] > 0 for h in hits)
    everywhere = ok("search", "", "station", *store, home=tmp_path).splitlines()
    assert len(everywhere) == 2 and "agent/planner" in everywhere[1]
    assert "no memory item matches 'zebra'" in ok("search", "/", "zebra", *store, home=tmp_path)


def test_list_pages_and_says_when_more_follow(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agents.db'}"
    write(url, [(("user", "u1"), f"k{i:02}", f"fact {i}") for i in range(7)])
    first = taskloom_cli("memory", "list", "--limit", "3", "--json", "--store", url, home=tmp_path)
    assert [i["key"] for i in json.loads(first.stdout)] == ["k00", "k01", "k02"]
    assert "--offset 3 shows the next ones" in first.stderr
    last = taskloom_cli(
        "memory", "list", "--limit", "3", "--offset", "6", "--store", url, home=tmp_path
    )
    assert [row.split()[1] for row in last.stdout.splitlines()[1:]] == ["k06"]
    assert last.stderr == ""


def test_hostile_stored_text_is_spelled_out_and_bounded(tmp_path: Path) -> None:
    path = tmp_path / "agents.db"
    url = f"sqlite:///{path}"
    key = f"k{ESCAPES}\u202e"
    write(url, [(("user", "u1"), key, f"hi{ESCAPES}\nthere\u202e"), (("user", "u1"), "big", "x")])
    # A tampered database: a value far past what a store takes.
    huge = "y" * (MAX_VALUE_BYTES * 16)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE taskloom_memory SET value = ? WHERE key = 'big'", (json.dumps(huge),))

    outputs = []
    for args in (("list",), ("show", "user/u1", key), ("search", "user", "hi"), ("namespaces",)):
        done = taskloom_cli("memory", *args, "--store", url, home=tmp_path)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout + done.stderr)
    for said in outputs:
        assert "\x1b" not in said and "\x07" not in said and "\u202e" not in said
    assert "k\\x1b[2J\\x1b]0;pwned\\x07\\u202e" in outputs[0]
    assert "hi\\x1b[2J\\x1b]0;pwned\\x07\nthere\\u202e" in outputs[1]
    assert max(len(line) for line in outputs[0].splitlines()) < 200

    big = taskloom_cli("memory", "show", "user/u1", "big", "--store", url, home=tmp_path)
    assert big.returncode == 0, big.stderr
    assert len(big.stdout) < MAX_VALUE_BYTES + 1000
    assert f"{len(huge) - MAX_VALUE_BYTES} more characters not shown" in big.stderr

    with sqlite3.connect(path) as db:
        db.execute("UPDATE taskloom_memory SET value = '{not json' WHERE key = 'big'")
    broken = taskloom_cli("memory", "show", "user/u1", "big", "--store", url, home=tmp_path)
    assert broken.returncode == 2
    assert "holds a memory item whose value is not JSON" in broken.stderr
    assert "changed outside taskloom" in broken.stderr


@requires_postgres
def test_credentials_in_the_store_url_are_never_printed(pg_schema: str, tmp_path: Path) -> None:
    secret = "sekret-pw-4821"
    # Trust authentication: the server takes any password.
    base = PG_DSN.replace("postgres@", f"postgres:{secret}@", 1)
    assert secret in base
    url = f"{base}?options=-csearch_path%3D{pg_schema}"
    runs = [
        taskloom_cli("memory", "list", "--store", url, home=tmp_path),
        taskloom_cli("memory", "show", "user/u1", "missing", "--store", url, home=tmp_path),
        taskloom_cli("memory", "search", "", "x", "--store", url, home=tmp_path),
        taskloom_cli(
            "memory",
            "list",
            "--store",
            f"{PG_DSN}?password={secret}&options=-csearch_path%3D{pg_schema}",
            home=tmp_path,
        ),
        # Unreachable: the error names host and port only.
        taskloom_cli(
            "memory",
            "list",
            "--store",
            f"postgresql://postgres:{secret}@127.0.0.1:1/test",
            home=tmp_path,
        ),
    ]
    assert [run.returncode for run in runs] == [0, 2, 0, 0, 2]
    assert "no memory items in postgresql://127.0.0.1" in runs[0].stdout
    assert "taskloom memory list user/u1 --store 'postgresql://127.0.0.1" in runs[1].stderr
    assert "password=[redacted]" in runs[3].stdout
    assert "127.0.0.1:1" in runs[4].stderr
    for run in runs:
        assert secret not in run.stdout + run.stderr


def test_a_malformed_store_url_is_refused_cleanly(tmp_path: Path) -> None:
    # The URL cannot be parsed (by psycopg, or at all): the hint that
    # repeats the command with it is still printed, not a traceback, and
    # the error that quotes the URL leaves its credentials out.
    secret = "sekret-pw-4821"
    for url in (f"postgresql://postgres:{secret}@[::1/test", f"mystore://me:{secret}@host/x"):
        done = taskloom_cli("memory", "list", "--store", url, home=tmp_path)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("taskloom: ") and "Traceback" not in done.stderr
        assert secret not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["show", "user//u1", "k"], "has an empty part"),
        (["show", "", "k"], "needs at least one part"),
        (["list", "user/%zz"], "a % that is not %XX"),
        (["list", "user/%ff"], "escapes are not UTF-8"),
        (["show", "user/u1", ""], "a memory key is a non-empty string"),
        (["list", "--limit", "0"], "0 is not a number from 1 to 10000"),
        (["list", "--limit", "10001"], "10001 is not a number from 1 to 10000"),
        (["list", "--offset", "-1"], "-1 is not a number of at least 0"),
        (["search", "user"], "the following arguments are required: QUERY"),
        (["list", "/".join(["p"] * 17)], "at most 16 parts"),
    ],
)
def test_bad_input_is_a_usage_error(
    args: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:///{tmp_path / 'agents.db'}"
    write(store, [(("user", "u1"), "k", "v")])
    try:
        code = main(["memory", *args, "--store", store])
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    err = capsys.readouterr().err
    assert said in err
    assert "hint:" in err


def test_reading_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "agents.db"
    done = taskloom_cli("memory", "list", "--store", f"sqlite:///{path}", home=tmp_path)
    assert done.returncode == 2
    assert str(path) in done.stderr
    assert not path.parent.exists()


def test_a_memory_store_is_said_to_be_empty_here(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory", "namespaces", "--store", "memory://"]) == 0
    out, err = capsys.readouterr()
    assert "no memory namespaces" in out
    assert "memory:// store lives inside one process" in err


@pytest.mark.parametrize(
    "namespace",
    [("user", "u1"), ("a/b", "%2F", "%"), ("Tromsø", "日本", "x y"), ("/",), ("%25%",)],
)
def test_a_printed_namespace_reads_back_as_itself(namespace: tuple[str, ...]) -> None:
    written = format_namespace(namespace)
    assert parse_namespace(written, prefix=False) == namespace
    assert parse_namespace(f"/{written}/", prefix=True) == namespace


def test_the_empty_prefix_is_every_namespace_but_no_item_namespace() -> None:
    assert parse_namespace("", prefix=True) == parse_namespace("/", prefix=True) == ()
    with pytest.raises(UsageError):
        parse_namespace("/", prefix=False)


@requires_postgres
def test_db_migrate_creates_every_table(pg_schema: str, tmp_path: Path) -> None:
    secret = "sekret-pw-4821"  # trust authentication: any password is taken
    url = PG_DSN.replace("postgres@", f"postgres:{secret}@", 1)
    done = taskloom_cli("db", "migrate", url, "--schema", pg_schema, home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "snapshots, budgets, memory" in done.stdout
    assert secret not in done.stdout + done.stderr
    with psycopg.connect(PG_DSN) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (pg_schema,),
        ).fetchall()
    tables = {name for (name,) in rows}
    assert {"taskloom_sessions", "taskloom_memory", "taskloom_snapshots", "taskloom_budgets"} <= (
        tables
    )


def test_app_gives_the_store_of_the_hosts_runtime(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'host.db'}"
    write(url, [(("agent", "planner"), "notes", "book early")])
    (tmp_path / "memhost.py").write_text(
        f"from taskloom import Runtime\ndef make_runtime():\n    return Runtime(store={url!r})\n"
    )
    done = taskloom_cli(
        "memory",
        "show",
        "agent/planner",
        "notes",
        "--app",
        "memhost:make_runtime",
        home=tmp_path,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "book early" in done.stdout
    both = taskloom_cli(
        "memory",
        "list",
        "--app",
        "memhost:make_runtime",
        "--store",
        url,
        home=tmp_path,
        cwd=tmp_path,
    )
    assert both.returncode == 2
    assert "--store and --app both name a store" in both.stderr


def test_without_store_the_embedded_store_is_read(tmp_path: Path) -> None:
    write(f"sqlite:///{tmp_path / 'taskloom.db'}", [(("user", "u1"), "tz", "Europe/Oslo")])
    assert "Europe/Oslo" in ok("show", "user/u1", "tz", home=tmp_path)
    empty = ok("list", "user/u2", home=tmp_path)
    assert f"no memory items under user/u2 in sqlite:///{tmp_path / 'taskloom.db'}" in empty
    assert "(the default store; --store names another)" in empty
