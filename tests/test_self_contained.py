"""The repository is self-contained: no file refers to anything outside it.

A fresh clone with nothing beside it must pass the README's test command, so
the recorded provider traffic lives in tests/corpora and no tracked file may
point at a sibling folder or at a path of one particular machine.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpora" / "pydantic-ai-cassettes"

# Built from pieces so that this file does not match itself.
FORBIDDEN = ("../" + "shared", "shared" + "/corpora", "/" + "work/")
# `Path(__file__)` followed by `.parent`s and/or `.parents[k]`: how far up it climbs.
CLIMB = re.compile(
    r"__file__\)(?:\.resolve\(\))?(?P<walk>(?:\.parents\[\d+\]|\.parent\b)+)",
)
# Folders that are never part of a checkout (in a copy without .git they are walked).
NOT_TRACKED = {".git", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def tracked_files() -> list[Path]:
    """The files git tracks, or every file of a copy without .git (as CI makes)."""
    done = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode == 0 and (ROOT / ".git").exists():
        return [ROOT / name for name in done.stdout.split("\0") if name]
    return [
        path
        for path in ROOT.rglob("*")
        if path.is_file()
        and not NOT_TRACKED.intersection(path.relative_to(ROOT).parts)
        and not path.relative_to(ROOT).parts[0].endswith(".egg-info")
    ]


def text_of(path: Path) -> str | None:
    data = path.read_bytes()
    return None if b"\0" in data else data.decode("utf-8", "replace")


def climbs_out(relative: Path, walk: str) -> bool:
    """Whether `Path(__file__)<walk>` names a folder above the repository root."""
    ups = sum(int(k) + 1 for k in re.findall(r"\.parents\[(\d+)\]", walk))
    ups += len(re.findall(r"\.parent\b", walk))
    # tests/x.py: 1 up is tests/, 2 up is the root, 3 up is outside.
    return ups > len(relative.parts)


def test_climbs_out_counts_levels() -> None:
    assert not climbs_out(Path("tests/x.py"), ".parents[1]")
    assert climbs_out(Path("tests/x.py"), ".parents[2]")
    assert climbs_out(Path("tests/x.py"), ".parents[1].parent")
    assert not climbs_out(Path("src/taskloom/cli/x.py"), ".parent.parent.parent.parent")


def test_no_tracked_file_refers_outside_the_repository() -> None:
    files = tracked_files()
    assert any(p.name == "README.md" and p.parent == ROOT for p in files)
    offending = []
    for path in files:
        relative = path.relative_to(ROOT)
        if path == Path(__file__).resolve() or relative.parts[:2] == ("tests", "corpora"):
            continue  # this file names the patterns; recorded traffic is third-party data
        text = text_of(path)
        if text is None:
            continue
        offending += [f"{relative}: {s!r}" for s in FORBIDDEN if s in text]
        offending += [
            f"{relative}: __file__{m['walk']}"
            for m in CLIMB.finditer(text)
            if climbs_out(relative, m["walk"])
        ]
    assert not offending, "references outside the repository:\n" + "\n".join(offending)


def test_the_recorded_traffic_is_in_the_repository() -> None:
    files = set(tracked_files())
    assert CORPUS / "LICENSE" in files and CORPUS / "README.md" in files
    for folder in ("test_openai", "test_openai_responses", "test_anthropic", "test_ollama"):
        assert any(p.parent == CORPUS / folder and p.suffix == ".yaml" for p in files), folder
