"""taskloom's dataclasses get their generated methods, but `__init__`,
compiled at their first call rather than at class creation (installed
when this module is imported, first thing in `taskloom/__init__`).

On Python 3.11 and 3.12, `dataclass` compiles each method it writes
(`__repr__`, `__eq__`, `__hash__`, a frozen class's `__setattr__` and
`__delattr__`, the order methods) from source text as it builds the class:
about half a million instructions a method, some 250 methods at
`import taskloom`, of which a plain run calls none. `install()` wraps
`dataclasses._create_fn` so that, for a class defined in a module of
taskloom's, such a method is first a stand-in that writes the real one at
its first call, puts it where the stand-in was and calls it. The text, its
names and its values are the ones `dataclass` passed, so the method is the
one `dataclass` would have written; only when it is compiled moves.

`__init__` is compiled at once (its signature is the class's, and
`fast_init` reads its code). Classes of other modules are left alone. Where
`dataclasses` has no `_create_fn` of the expected shape (Python 3.13 compiles
a class's methods together), nothing is installed.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
from collections.abc import Callable, Mapping
from typing import Any

_EXPECTED = ["name", "args", "body", "globals", "locals", "return_type"]
_INSTALL_LOCK = threading.Lock()


def install() -> None:
    """Wrap `dataclasses._create_fn` once per process (see the module's
    docstring); a no-op where it is absent or has another shape."""
    with _INSTALL_LOCK:
        current = getattr(dataclasses, "_create_fn", None)
        if current is None or getattr(current, "_taskloom_lazy", False):
            return
        try:
            parameters = list(inspect.signature(current).parameters)
        except (TypeError, ValueError):
            return
        if parameters != _EXPECTED:
            return
        dataclasses._create_fn = _wrapping(current)  # type: ignore[attr-defined]


def _wrapping(create: Callable[..., Any]) -> Callable[..., Any]:
    """`create` (`_create_fn`), deferring what `_deferred` says it may."""

    def _create_fn(
        name: str,
        args: Any,
        body: Any,
        *,
        globals: Mapping[str, Any] | None = None,
        locals: dict[str, Any] | None = None,
        return_type: Any = dataclasses.MISSING,
    ) -> Any:
        def build() -> Any:
            return create(name, args, body, globals=globals, locals=locals, return_type=return_type)

        if not _deferred(name, globals):
            return build()
        return _stand_in(name, build)

    _create_fn._taskloom_lazy = True  # type: ignore[attr-defined]
    return _create_fn


def _deferred(name: str, module_globals: Mapping[str, Any] | None) -> bool:
    """Whether method `name` of a class whose module has `module_globals` is
    compiled at its first call: every method but `__init__` of taskloom's."""
    if name == "__init__" or module_globals is None:
        return False
    module = module_globals.get("__name__")
    return isinstance(module, str) and (module == "taskloom" or module.startswith("taskloom."))


def _stand_in(name: str, build: Callable[[], Any]) -> Callable[..., Any]:
    """A method that builds the real one at its first call, replaces itself
    with it on the class that holds it, and calls it."""
    # The stand-in names itself only through `real` (its attribute and its
    # closure both hold the list): a function that referred to itself would
    # be left in a reference cycle for the collector once it is replaced.
    real: list[Callable[..., Any]] = []

    def stand_in(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not real:
            made = build()
            # Later calls go straight to the real method. A stand-in that
            # another wrapper holds (`__repr__` under `recursive_repr`, whose
            # `wraps` copied `_taskloom_real` onto it) stays under it and
            # keeps forwarding: the wrapper is not replaced.
            for klass in type(self).__mro__:
                held: Any = klass.__dict__.get(name)
                if getattr(held, "_taskloom_real", None) is real and not hasattr(
                    held, "__wrapped__"
                ):
                    made.__qualname__ = held.__qualname__
                    setattr(klass, name, made)
                    break
            real.append(made)
        return real[0](self, *args, **kwargs)

    stand_in.__name__ = name
    stand_in.__qualname__ = name
    stand_in._taskloom_real = real  # type: ignore[attr-defined]
    return stand_in


install()
