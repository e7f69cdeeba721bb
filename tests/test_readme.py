"""Every code block in the README runs: python blocks in order, in one process."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_python_blocks_run_in_order() -> None:
    code = blocks("python")
    assert len(code) >= 4
    # Blocks call asyncio.run, so they run outside pytest's event loop: in a subprocess.
    program = "\n\n".join(code)
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "Tromsø: clear skies" in done.stdout and "get_weather -> 4°C, rain" in done.stdout


def test_shell_blocks_are_the_two_setup_commands() -> None:
    shell = [b.strip() for b in blocks("sh")]
    assert len(shell) == 2
    assert shell[0].endswith("taskloom demo") and "pip install -e '.[cli]'" in shell[0]
    assert shell[1].endswith("python -m pytest")
    ci = (README.parent / ".ci" / "run").read_text()
    assert shell[1] in ci  # CI runs exactly the README's test command


def test_demo_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "taskloom.cli", "demo", "--fast"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "TASKLOOM_HOME": str(tmp_path), "COLUMNS": "120"},
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "scripted" in out
    assert out.count("→ get_weather(city=") == 3
    assert "strategy" in out and "injecting a correction" in out
    assert "Packing list" in out and "status" in out and "completed" in out
    # 2: an approval pause, then a resume from a fresh runtime over SQLite
    assert "needs approval" in out and "awaiting_approval" in out and "confirmation TRM-2291" in out
    # 3: a background command whose result reaches the model at a later round
    assert "background_run(" in out and "finished" in out and "212 photos are safe" in out
    # 4: three researchers fan out in parallel lanes, one worker reports later
    for lane in ("[aurora#", "[sledding#", "[fjords#", "[prices#"):
        assert lane in out, lane
    assert "background agent 'prices'" in out and "aurora hunting" in out
