"""A missing optional extra is named, with the command that installs it
(`pip install 'taskloom[EXTRA]'`, which works for a wheel and a clone's
editable install alike), by the Python API and the `taskloom` command
alike. Each case runs in a fresh interpreter where the extra's module is
made unimportable (`sys.modules[name] = None`)."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
import textwrap
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from cli_process import SOURCES, TESTS, taskloom_cli
from fresh_process import run_fresh
from taskloom.cli import main

INSTALL = "pip install 'taskloom[{extra}]'"


def _python(code: str, *, without: str) -> subprocess.CompletedProcess[str]:
    prelude = f"import sys\nsys.modules[{without!r}] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": f"{SOURCES}:{TESTS}", "PATH": "/usr/bin:/bin"},
    )


def _says_install(text: str, extra: str) -> None:
    assert f"the {extra} extra" in text, text
    assert INSTALL.format(extra=extra) in text, text
    assert "pip install -e" not in text and "clone" not in text, text


API_CASES = [
    (
        "psycopg",
        "postgres",
        "from taskloom import Runtime\nRuntime(store='postgresql://127.0.0.1/test')",
    ),
    ("psycopg", "postgres", "from taskloom.backends import PostgresBackend"),
    ("mcp_types", "mcp", "from taskloom.mcp import MCPServer"),
    ("mcp", "mcp", "from taskloom.mcp import serve_agent"),
    ("starlette", "web", "from taskloom.console import Console"),
    ("opentelemetry", "otel", "from taskloom.tracing import GenAIObserver"),
    ("httpx", "a2a", "from taskloom.a2a import RemoteAgent"),
    ("pytest", "testing", "from taskloom.testing.store_contract import StoreContract"),
    ("pytest", "testing", "import taskloom.testing.store_contract"),
    ("psycopg", "postgres", "import taskloom.backends.postgres"),
]


@pytest.mark.parametrize(("module", "extra", "code"), API_CASES)
def test_the_python_api_names_the_missing_extra(module: str, extra: str, code: str) -> None:
    done = _python(
        f"""
        try:
            {code.replace(chr(10), chr(10) + " " * 12)}
        except ModuleNotFoundError as exc:
            assert exc.name.partition(".")[0] == {module!r}, exc.name
            print(exc)
        else:
            print("imported")
        """,
        without=module,
    )
    assert done.returncode == 0, done.stderr
    _says_install(done.stdout, extra)


def _cli_without(module: str, *argv: str) -> tuple[str, ...]:
    code = f"import sys; sys.modules[{module!r}] = None; from taskloom.cli import main; "
    return ("-c", code + f"sys.exit(main({list(argv)!r}))")


@pytest.mark.parametrize(
    ("module", "extra", "argv"),
    [
        ("psycopg", "postgres", ("sessions", "list", "--store", "postgresql://127.0.0.1/test")),
        ("mcp_types", "mcp", ("mcp", "serve", "cli_tools:nothing")),
        ("uvicorn", "web", ("serve",)),
        ("rich", "cli", ("sessions", "list")),
    ],
)
def test_the_command_names_the_missing_extra(
    module: str, extra: str, argv: tuple[str, ...], tmp_path: Path
) -> None:
    done = taskloom_cli(home=tmp_path, python_args=_cli_without(module, *argv))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    error, hint = done.stderr.strip().splitlines()
    assert error.startswith("taskloom: ") and module in error, error
    _says_install(error + hint, extra)
    assert "install the package that provides" not in hint


def _normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


@functools.cache
def _installed_modules() -> dict[str, list[str]]:
    """The top-level modules of every installed distribution, by its normalized name."""
    modules: dict[str, list[str]] = {}
    for module, distributions in packages_distributions().items():
        for distribution in distributions:
            modules.setdefault(_normalized(distribution), []).append(module)
    return modules


def _modules_of(requirement: str) -> list[str]:
    """The top-level modules the installed distribution `requirement` names brings."""
    distribution = re.split(r"[\s\[<>=~!;]", requirement, maxsplit=1)[0]
    return sorted(_installed_modules().get(_normalized(distribution), []))


def test_every_extra_of_pyproject_is_named_for_a_module_it_brings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A host's module that needs one the environment lacks: the command says
    # which extra brings it, whichever extra that is.
    pyproject = tomllib.loads((SOURCES.parent / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    monkeypatch.setenv("TASKLOOM_HOME", str(tmp_path / "home"))
    monkeypatch.syspath_prepend(str(tmp_path))
    named: set[str] = set()
    for extra, requirements in extras.items():
        if extra in ("dev", "docs"):
            continue
        for requirement in requirements:
            if requirement.startswith("taskloom["):
                continue  # another extra's requirements, checked as that extra's
            modules = _modules_of(requirement)
            assert modules, f"{requirement} (the {extra} extra) is not installed"
            for module in modules:
                host = f"host_needing_{module}"
                (tmp_path / f"{host}.py").write_text(
                    f"raise ModuleNotFoundError(name={module!r})\n"
                )
                assert main(["sessions", "list", "--app", f"{host}:app"]) == 2
                error = capsys.readouterr().err
                assert f"no module named {module!r}" in error, error
                _says_install(error, extra)
                named.add(extra)
    assert named == set(extras) - {"dev", "docs"}


@pytest.mark.slow
def test_every_public_name_needing_an_extra_names_it_with_the_core_only() -> None:
    # Every installed module the core's requirements do not bring made
    # unimportable, as in a venv where the wheel is installed without extras
    # (scripts/check_wheel.sh runs the same check in one).
    script = SOURCES.parent / "scripts" / "check_extra_hints.py"
    said = run_fresh(script=script, args=("--simulate",))
    assert "0 raw failures" in said
    for extra in ("a2a", "mcp", "otel", "postgres", "testing", "web"):
        assert f"the {extra} extra named by" in said, said
