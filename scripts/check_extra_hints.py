"""Import every public module of taskloom and every name in its `__all__`;
each one that fails must fail with the named-extra error: a
`ModuleNotFoundError` saying which extra it needs and `pip install
'taskloom[EXTRA]'`. Prints what was checked; exits 1 on a raw failure.

    python scripts/check_extra_hints.py            # in a venv with the core only
    python scripts/check_extra_hints.py --simulate # here: the extras' modules made unimportable

`scripts/check_wheel.sh` runs it in a fresh venv where the wheel is installed
without extras; `tests/test_extras.py` runs it with `--simulate`.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys

HINT = re.compile(r"needs the (\w+) extra .*: pip install 'taskloom\[(\w+)\]'$")


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=~!;(]", requirement, maxsplit=1)[0]).lower()


def _simulate_core_only() -> None:
    # Every installed module that taskloom's core requirements do not bring
    # (transitively) made unimportable, as in a venv with the core only.
    from importlib.metadata import PackageNotFoundError, packages_distributions, requires

    core, todo = {"taskloom"}, ["taskloom"]
    while todo:
        try:
            requirements = requires(todo.pop()) or []
        except PackageNotFoundError:
            continue  # required on other platforms only
        for requirement in requirements:
            name = _name(requirement)
            if "extra ==" not in requirement and name not in core:
                core.add(name)
                todo.append(name)
    for module, distributions in packages_distributions().items():
        if not core & {_name(d) for d in distributions}:
            sys.modules[module] = None  # type: ignore[assignment]


def main(argv: list[str]) -> int:
    if "--simulate" in argv:
        _simulate_core_only()
    import taskloom

    public = ["taskloom"] + [
        info.name
        for info in pkgutil.walk_packages(taskloom.__path__, "taskloom.", onerror=lambda _: None)
        if not any(part.startswith("_") for part in info.name.split("."))
        # The command's own modules: `taskloom` reports a missing extra itself.
        and not info.name.startswith("taskloom.cli.")
    ]
    checked, named, raw = 0, {}, []
    for name in public:
        targets = [(name, None)]
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            module, failure = None, exc
        else:
            failure = None
            targets = [(name, attr) for attr in getattr(module, "__all__", ())]
        for where, attr in targets:
            checked += 1
            if attr is not None:
                try:
                    getattr(module, attr)
                    continue
                except Exception as exc:
                    failure = exc
            elif failure is None:
                continue
            what = f"{where}.{attr}" if attr else f"import {where}"
            told = HINT.search(str(failure)) if isinstance(failure, ModuleNotFoundError) else None
            if told is None or told.group(1) != told.group(2):
                raw.append(f"{what}: {type(failure).__name__}: {failure}")
            else:
                named.setdefault(told.group(1), []).append(what)
    print(f"checked {checked} public modules and names; {len(raw)} raw failures")
    for extra, whats in sorted(named.items()):
        print(f"  the {extra} extra named by {len(whats)}, e.g. {whats[0]}")
    for line in raw:
        print(f"  RAW {line}")
    return 1 if raw else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
