"""The public surface: every name taskloom offers, listed, and each one real.

`tests/public_surface.txt` lists, module by module, the `__all__` of every
public module (a package's face, or a module whose dotted path has no
underscored part). A change to what taskloom offers shows up as a change to
that file, reviewed with the code. Beside the listing (as trio's
test_exports does), each exported name must exist, be defined or re-exported
on purpose (nothing public left out of `__all__`), and say what it promises
(a docstring of its own).

Run this file as a script to print the listing after a deliberate change:
`python tests/test_public_surface.py > tests/public_surface.txt`.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
import types
from pathlib import Path

import pytest

import taskloom

LISTING = Path(__file__).with_name("public_surface.txt")

# The command's modules are the command line, not an importable API.
NOT_API = ("taskloom.cli.", "taskloom.__main__")


def public_modules() -> list[str]:
    """Dotted names of taskloom's public modules, sorted."""
    names = ["taskloom"]
    for info in pkgutil.walk_packages(taskloom.__path__, "taskloom."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        if info.name.startswith(NOT_API):
            continue
        names.append(info.name)
    return sorted(names)


def surface() -> list[str]:
    """One line per exported name: `module: name`."""
    lines: list[str] = []
    for name in public_modules():
        module = importlib.import_module(name)
        lines.extend(f"{name}: {export}" for export in sorted(module.__all__))
    return lines


def test_the_listing_is_the_surface() -> None:
    listed = LISTING.read_text().splitlines()
    now = surface()
    added = sorted(set(now) - set(listed))
    removed = sorted(set(listed) - set(now))
    assert not added and not removed, (
        f"public surface changed; added {added}, removed {removed}. If on purpose, "
        "regenerate: python tests/test_public_surface.py > tests/public_surface.txt"
    )


@pytest.mark.parametrize("module_name", public_modules())
def test_every_export_exists_and_every_public_definition_is_exported(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = set(module.__all__)
    assert len(exported) == len(module.__all__), f"{module_name}.__all__ names one twice"
    missing = [name for name in exported if not hasattr(module, name)]
    assert not missing, f"{module_name}.__all__ names what it lacks: {missing}"
    # A class or function defined in this very module with a public name is
    # offered; left out of __all__ it is public by accident.
    unlisted = [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and name not in exported
        and (inspect.isclass(value) or inspect.isfunction(value))
        and getattr(value, "__module__", None) == module_name
    ]
    assert not unlisted, f"{module_name} defines public names outside __all__: {unlisted}"


def _own_doc(value: object) -> str | None:
    doc = (
        value.__dict__.get("__doc__") if inspect.isclass(value) else getattr(value, "__doc__", None)
    )
    if not isinstance(doc, str) or not doc.strip():
        return None
    name = getattr(value, "__name__", "")
    # dataclasses and NamedTuples write a signature when the class has no docstring.
    if inspect.isclass(value) and doc.startswith(f"{name}("):
        return None
    return doc


def test_every_exported_class_function_and_module_says_what_it_promises() -> None:
    silent: list[str] = []
    for module_name in public_modules():
        module = importlib.import_module(module_name)
        if _own_doc(module) is None:
            silent.append(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            if not (
                inspect.isclass(value)
                or inspect.isroutine(value)
                or isinstance(value, types.ModuleType)
            ):
                continue  # constants and type aliases carry their docs in the source
            if _own_doc(value) is None:
                silent.append(f"{module_name}.{name}")
    assert not silent, f"public names without a docstring: {sorted(set(silent))}"


def test_entry_payloads_are_named_by_one_rule() -> None:
    # A payload is named for what happened (`Steer`, `ApprovalDecision`); it
    # takes the `Entry` suffix exactly when that bare name is already another
    # public name (the event `RunStarted`, the `Message`, the `Deferred` handle).
    import taskloom.entries as entries

    elsewhere = {
        line.split(": ")[1] for line in surface() if not line.startswith("taskloom.entries:")
    }
    payloads = [
        name
        for name in entries.__all__
        if inspect.isclass(value := getattr(entries, name))
        and issubclass(value, entries.Payload)
        and value is not entries.Payload
    ]
    wrong = [
        name
        for name in payloads
        if name.endswith("Entry") != (name.removesuffix("Entry") in elsewhere)
    ]
    assert payloads and not wrong, f"entry payloads breaking the naming rule: {wrong}"


if __name__ == "__main__":
    sys.stdout.write("\n".join(surface()) + "\n")
