"""Type checkers see what an agent's runs return: mypy on tests/typing/typed_example.py
must reveal exactly the types its `# expect:` comments name, and report exactly
the errors its `# expect-error:` comments name."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "tests" / "typing" / "typed_example.py"

_EXPECT = re.compile(r"#\s*expect:\s*(.+?)\s*$")
_EXPECT_ERROR = re.compile(r"#\s*expect-error:\s*([\w-]+)\s*$")
_REVEALED = re.compile(r':(\d+): note: Revealed type is "(.+)"$')
_ERROR = re.compile(r":(\d+): error: .*\[([\w-]+)\]$")


def test_mypy_reveals_the_documented_types() -> None:
    expected: dict[int, str] = {}
    expected_errors: dict[int, str] = {}
    for number, line in enumerate(EXAMPLE.read_text().splitlines(), start=1):
        if m := _EXPECT.search(line):
            expected[number] = m.group(1)
        elif m := _EXPECT_ERROR.search(line):
            expected_errors[number] = m.group(1)
    assert len(expected) >= 10 and expected_errors

    env = {**os.environ, "MYPYPATH": str(ROOT / "src")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--no-error-summary",
            "--show-error-codes",
            str(EXAMPLE),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = done.stdout.splitlines()
    revealed = {int(m.group(1)): m.group(2) for line in lines if (m := _REVEALED.search(line))}
    errors = {
        int(m.group(1)): m.group(2)
        for line in lines
        if line.startswith(str(EXAMPLE.relative_to(ROOT))) and (m := _ERROR.search(line))
    }
    others = [line for line in lines if ": error:" in line and not line.startswith("tests/")]
    assert others == [], done.stdout + done.stderr
    assert revealed == expected, done.stdout + done.stderr
    assert errors == expected_errors, done.stdout + done.stderr
