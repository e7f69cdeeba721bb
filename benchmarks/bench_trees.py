"""CPU per model round of two source trees, in fresh processes taking turns.

    python benchmarks/bench_trees.py BASE_TREE [--trials 9] [--runs 300]

How a change is shown not to slow the loop: `BASE_TREE` is another checkout
of taskloom (say `git worktree add --detach /tmp/base <commit>`). Each trial
starts one process per tree, alternating, each importing its own `src/` and
running its own `benchmarks/bench_core.py`'s `cpu_per_round` (scripted runs
of 3 tool rounds on the memory store) and `bench_durable.py`'s `per_round`
on SQLite. The table gives best and median over the trials, and the ratio of
this tree to the base: below 1.0 is faster.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

PROBE = """
import asyncio, sys, tempfile, os
sys.path.insert(0, {bench!r})
import bench_core, bench_durable
per_round, model, marginal = asyncio.run(bench_core.cpu_per_round({runs}))
with tempfile.TemporaryDirectory() as d:
    cpu, _, _ = asyncio.run(bench_durable.per_round(f"sqlite:///{{d}}/bench.db", {runs}))
print(per_round - model, marginal, cpu)
"""

MEASURES = (
    "runtime CPU per round, memory (µs)",
    "one more tool round, memory (µs)",
    "CPU per round, SQLite (µs)",
)


def probe(tree: Path, runs: int) -> list[float]:
    """One fresh process of `tree`: its figures, in the order of MEASURES."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    code = PROBE.format(bench=str(tree / "benchmarks"), runs=runs)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    )
    return [float(x) for x in out.stdout.split()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("base", type=Path, help="the other checkout of taskloom")
    parser.add_argument("--trials", type=int, default=9)
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    figures: dict[Path, list[list[float]]] = {args.base: [], HERE: []}
    for _ in range(args.trials):
        for tree in figures:
            figures[tree].append(probe(tree, args.runs))
    print(f"{'measure':<38} {'base best/median':>18} {'this best/median':>18} {'ratio':>7}")
    for i, name in enumerate(MEASURES):
        base = [f[i] for f in figures[args.base]]
        this = [f[i] for f in figures[HERE]]
        ratio = statistics.median(this) / statistics.median(base)
        print(
            f"{name:<38} {min(base):>8.1f}/{statistics.median(base):<9.1f}"
            f" {min(this):>8.1f}/{statistics.median(this):<9.1f} {ratio:>6.2f}×"
        )


if __name__ == "__main__":
    main()
