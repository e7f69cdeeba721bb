"""Every error of the `taskloom` command is one line and a hint, exit code 2,
no traceback unless `--debug` asks for it."""

from __future__ import annotations

from pathlib import Path

from cli_process import empty_store, taskloom_cli
from pg import PG_DSN, requires_postgres


def _without(module: str, *argv: str) -> list[str]:
    """`python -c` arguments running the command as if `module` were not installed."""
    code = (
        "import sys; "
        f"sys.modules[{module!r}] = None; "
        "from taskloom.cli import main; "
        f"sys.exit(main({list(argv)!r}))"
    )
    return ["-c", code]


def _error_and_hint(stderr: str) -> tuple[str, str]:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 2, stderr
    error, hint = lines
    assert error.startswith("taskloom: "), stderr
    assert hint.lstrip().startswith("hint: "), stderr
    return error, hint


def test_a_missing_extra_names_the_install_command(tmp_path: Path) -> None:
    done = taskloom_cli(home=tmp_path, python_args=tuple(_without("rich", "sessions", "list")))
    assert done.returncode == 2, done.stderr
    error, hint = _error_and_hint(done.stderr)
    assert "rich" in error
    assert "pip install 'taskloom[cli]'" in hint


def test_a_missing_database_driver_names_the_postgres_extra(tmp_path: Path) -> None:
    argv = ("sessions", "list", "--store", "postgresql://127.0.0.1:5432/test")
    done = taskloom_cli(home=tmp_path, python_args=tuple(_without("psycopg", *argv)))
    assert done.returncode == 2, done.stderr
    error, hint = _error_and_hint(done.stderr)
    assert "psycopg" in error
    assert "pip install 'taskloom[postgres]'" in hint


def test_an_unknown_session_suggests_listing_them(tmp_path: Path) -> None:
    empty_store(tmp_path)
    done = taskloom_cli("sessions", "show", "nope", home=tmp_path)
    assert done.returncode == 2
    error, hint = _error_and_hint(done.stderr)
    assert "nope" in error and "taskloom sessions list" in hint


def test_a_bad_store_url_is_one_line(tmp_path: Path) -> None:
    done = taskloom_cli("sessions", "list", "--store", "mysql://x", home=tmp_path)
    assert done.returncode == 2
    error, hint = _error_and_hint(done.stderr)
    assert "mysql" in error and "--store" in hint


def test_a_bad_tool_names_the_module_and_attribute(tmp_path: Path) -> None:
    done = taskloom_cli(
        "run", "hi", "--model", "ollama:qwen3", "--tool", "cli_tools:nope", home=tmp_path
    )
    assert done.returncode == 2
    error, hint = _error_and_hint(done.stderr)
    assert "cli_tools" in error and "nope" in error
    assert "module:attribute" in hint


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    empty_store(tmp_path)
    done = taskloom_cli("--debug", "sessions", "show", "nope", home=tmp_path)
    assert done.returncode == 2
    assert "Traceback" in done.stderr and "SessionNotFound" in done.stderr
    assert done.stderr.strip().splitlines()[-2].startswith("taskloom: ")
    after = taskloom_cli("sessions", "show", "nope", "--debug", home=tmp_path)
    assert after.returncode == 2 and "Traceback" in after.stderr


def test_app_excludes_flags_it_would_ignore(tmp_path: Path) -> None:
    done = taskloom_cli("resume", "x", "--app", "a:b", "--tool", "c:d", home=tmp_path)
    assert done.returncode == 2
    error, hint = _error_and_hint(done.stderr)
    assert "--tool" in error and "ignored" in error
    done = taskloom_cli("resume", "x", "--app", "a:b", "--store", "memory://", home=tmp_path)
    assert done.returncode == 2
    error, hint = _error_and_hint(done.stderr)
    assert "--store" in error and "--store" in hint


@requires_postgres
def test_a_hint_never_prints_the_stores_credentials(pg_schema: str, tmp_path: Path) -> None:
    secret = "hint-secret-7730"
    # Trust authentication: the server takes any password.
    with_password = PG_DSN.replace("postgres@", f"postgres:{secret}@", 1)
    assert secret in with_password
    urls = [
        f"{with_password}?options=-csearch_path%3D{pg_schema}",
        f"{PG_DSN}?password={secret}&options=-csearch_path%3D{pg_schema}",
    ]
    for url in urls:
        done = taskloom_cli("sessions", "show", "nope", "--store", url, home=tmp_path)
        assert done.returncode == 2, done.stderr
        error, hint = _error_and_hint(done.stderr)
        assert "nope" in error and "--store" in hint
        assert secret not in done.stdout + done.stderr
    assert (
        "postgres:***@"
        in taskloom_cli("sessions", "show", "nope", "--store", urls[0], home=tmp_path).stderr
    )
