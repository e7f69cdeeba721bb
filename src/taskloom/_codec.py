"""The one codec of what taskloom stores: frozen dataclasses as plain JSON data.

A class's encoder and decoder are generated once, on first use (not at
import: most classes a process never encodes), from its fields and their
annotations: text, numbers, booleans, dicts and `Any` as they are; tuples as
lists; other mappings as dicts; enums by value; bytes as base64; optional
values; dataclasses nested, alone or in a union told apart by a constant
(`init=False`) field. Constant fields are written first and never read.
`stored(...)` declares what a class's shape needs beyond that.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self, TypeVar

T = TypeVar("T")
_OPTIONS: dict[type, tuple[frozenset[str], Mapping[str, Any], frozenset[str]]] = {}
_ENCODERS: dict[type, Callable[[Any], dict[str, Any]]] = {}
_DECODERS: dict[type, Callable[[Mapping[str, Any], dict[str, Any]], Any]] = {}
_NESTED = "ENC.get(type(@), encode)(@)"  # a built encoder without a call between


class _Factory:
    """A factory-made default, not yet made (shown as dataclass shows it)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def stored(
    omit: Iterable[str] = (), absent: Mapping[str, Any] | None = None, skip: Iterable[str] = ()
) -> Callable[[type[T]], type[T]]:
    """Declare a class's stored shape: the `omit`
    fields are left out while they equal their default; a key missing from
    stored data reads as the field's default, else as its value in `absent`,
    else raises `KeyError`; the `skip` fields are the class's own to write
    and read."""

    def declare(cls: type[T]) -> type[T]:
        _OPTIONS[cls] = (frozenset(omit), absent or {}, frozenset(skip))
        return fast_init(cls)

    return declare


def fast_init(cls: type[T]) -> type[T]:
    """Give a frozen dataclass with slots an `__init__` that fills its slots
    through their descriptors: the same parameters, defaults, factories and
    `__post_init__` as the one `dataclass` wrote, at about half its cost
    (that one passes each field through `object.__setattr__`, the frozen
    class's own `__setattr__` refusing). Other classes are returned as they are.

    The new `__init__` is written at the class's first instance, not here: a
    process imports about a hundred such classes and makes a fifth of them,
    and writing one compiles code. Until then the class's `__init__` is a
    stand-in that writes it, puts it in its place and calls it; it wraps
    `dataclass`'s own (`__wrapped__`), so its signature reads the same."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        return cls
    # A class that inherits its `__init__` (`init=False`) keeps it, as
    # `dataclass` has it.
    original: Callable[..., None] | None = cls.__dict__.get("__init__")
    if original is None or getattr(original, "__code__", None) is None:
        return cls
    dataclass_init: Callable[..., None] = original

    # `first` does not name itself (it would be left in a reference cycle
    # for the collector once replaced): it knows itself by its marker.
    def first(self: Any, *args: Any, **kwargs: Any) -> None:
        init: Callable[..., None] = cls.__dict__["__init__"]
        if getattr(init, "_taskloom_first_of", None) is cls:
            init = _written_init(cls, dataclass_init)
            cls.__init__ = init  # type: ignore[method-assign]
        init(self, *args, **kwargs)

    first.__module__ = original.__module__
    first.__qualname__ = original.__qualname__
    first.__doc__ = original.__doc__
    first.__annotations__ = dict(getattr(original, "__annotations__", {}))
    first.__wrapped__ = original  # type: ignore[attr-defined]
    first._taskloom_first_of = cls  # type: ignore[attr-defined]
    cls.__init__ = first  # type: ignore[method-assign]
    return cls


def _written_init(cls: type, original: Callable[..., None]) -> Callable[..., None]:
    """`fast_init`'s `__init__` for `cls`, or `original` (`dataclass`'s) when
    the class's fields are not all plain slots."""
    fields = dataclasses.fields(cls)
    code = original.__code__
    parameters = code.co_varnames[1 : code.co_argcount + code.co_kwonlyargcount]
    if sorted(parameters) != sorted(f.name for f in fields if f.init):
        return original  # InitVar pseudo-fields (parameters no field holds): left to dataclass
    ns: dict[str, Any] = {"MISSING": _FACTORY}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for f in fields:
        name = f.name
        slot = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
        if slot is None or not hasattr(slot, "__set__"):
            return original
        ns[f"S_{name}"] = slot.__set__
        has_default = f.default is not dataclasses.MISSING
        has_factory = f.default_factory is not dataclasses.MISSING
        if has_default:
            ns[f"D_{name}"] = f.default
        if has_factory:
            ns[f"F_{name}"] = f.default_factory
        if not f.init:
            if has_default:
                body.append(f" S_{name}(self, D_{name})")
            elif has_factory:
                body.append(f" S_{name}(self, F_{name}())")
            continue
        if has_default:
            param = f"{name}=D_{name}"
        elif has_factory:
            param = f"{name}=MISSING"
            body.append(f" if {name} is MISSING: {name} = F_{name}()")
        else:
            param = name
        (keyword if f.kw_only else positional).append(param)
        body.append(f" S_{name}(self, {name})")
    if hasattr(cls, "__post_init__"):
        body.append(" self.__post_init__()")
    args = ["self", *positional, *(["*", *keyword] if keyword else [])]
    exec(f"def __init__({', '.join(args)}):\n" + ("\n".join(body) or " pass"), ns)
    init: Callable[..., None] = ns["__init__"]
    init.__module__ = cls.__module__
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = original.__doc__
    init.__annotations__ = dict(getattr(original, "__annotations__", {}))
    return init


def encode(value: Any) -> dict[str, Any]:
    """The value (a dataclass) as plain JSON data, which decodes to an equal value."""
    return (_ENCODERS.get(type(value)) or _build(type(value), _ENCODERS))(value)


def decode(cls: type[T], data: Mapping[str, Any], **given: Any) -> T:
    """The `cls` that `data` describes; `given` fields are taken as they are."""
    return (_DECODERS.get(cls) or _build(cls, _DECODERS))(data, given)  # type: ignore[no-any-return]


class Stored:
    """`to_dict` and `from_dict` by the codec."""

    __slots__ = ()

    to_dict = encode

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Self:
        """The value `to_dict` described."""
        return decode(cls, d)


def _build(cls: type, into: dict[type, Any]) -> Any:
    """Generate `cls`'s encoder (`into` is `_ENCODERS`) or decoder, once."""
    omit, absent, skip = _OPTIONS.get(cls, (frozenset(), {}, frozenset()))
    hints = typing.get_type_hints(cls)
    ns: dict[str, Any] = {"M": dataclasses.MISSING, "cls": cls, "encode": encode, "ENC": _ENCODERS}
    fields = [f for f in dataclasses.fields(cls) if f.name not in skip]
    fields.sort(key=lambda f: f.init)  # constants first
    literal: list[str] = []
    enc: list[str] = []
    dec = ["def run(d, g):", " get = d.get", " kw = {}"]
    for f in fields:
        name, key = f.name, repr(f.name)
        to, back = _converters(hints[name], ns)
        if name in omit:
            ns[f"D_{name}"] = f.default
            test = "is not None" if f.default is None else f"!= D_{name}"
            enc += [f" if o.{name} {test}:", f"  d[{key}] = {to.replace('@', f'o.{name}')}"]
        elif enc:
            enc.append(f" d[{key}] = {to.replace('@', f'o.{name}')}")
        else:
            literal.append(f"{key}: {to.replace('@', f'o.{name}')}")
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            ns[f"D_{name}"], fallback = f.default, f"D_{name}"
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"F_{name}"], fallback = f.default_factory, f"F_{name}()"
        elif name in absent:
            ns[f"A_{name}"], fallback = absent[name], back.replace("@", f"A_{name}")
        else:
            fallback = f"d[{key}]"  # raises KeyError
        read = f"({fallback} if (v := get({key}, M)) is M else {back.replace('@', 'v')})"
        dec.append(f" kw[{key}] = g[{key}] if {key} in g else {read}")
    dec += [f" if {n!r} in g: kw[{n!r}] = g[{n!r}]" for n in skip]
    if into is _ENCODERS:
        code = ["def run(o):", f" d = {{{', '.join(literal)}}}", *enc, " return d"]
    else:
        code = [*dec, " return cls(**kw)"]
    exec("\n".join(code), ns)
    into[cls] = ns["run"]
    return ns["run"]


def _converters(hint: Any, ns: dict[str, Any]) -> tuple[str, str]:
    """How one annotated value is written and read: expressions of `@`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        if len(present) > 1 and all(dataclasses.is_dataclass(a) for a in present):
            tagged = f"T_{len(ns)}"
            ns[tagged] = _tagged(present)
            return _NESTED, tagged + "(@)"
        if len(present) > 1:
            return "@", "@"  # text or one of its literals
        to, back = (
            c if c == "@" else f"(None if @ is None else {c})" for c in _converters(present[0], ns)
        )
        return to, back
    if origin is tuple:
        to, back = _converters(args[0], ns)
        return (
            "list(@)" if to == "@" else f"[{to.replace('@', 'x')} for x in @]",
            "(tuple(@) if @ else ())"
            if back == "@"
            else f"(tuple([{back.replace('@', 'x')} for x in @]) if @ else ())",
        )
    if origin in (dict, Mapping) or hint in (dict, Mapping):  # a Mapping is copied to a dict
        return "@" if dict in (origin, hint) else "dict(@)", "(dict(@) if @ else {})"
    if hint in (str, int, float, bool):
        return "@", f"{hint.__name__}(@)"
    if hint is bytes:
        ns["b64"] = base64
        return "b64.b64encode(@).decode('ascii')", "b64.b64decode(@)"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        ns[hint.__name__] = hint
        return "@.value", f"{hint.__name__}(@)"
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        ns[f"R_{hint.__name__}"] = getattr(hint, "from_dict", None) or (lambda v: decode(hint, v))
        return _NESTED, f"R_{hint.__name__}(@)"
    return "@", "@"  # Any, Literal, object: JSON as it is


def _tagged(classes: list[Any]) -> Callable[[Mapping[str, Any]], Any]:
    """Decode one of `classes`, told apart by their constant field's value."""
    tags = {f.default: (f.name, c) for c in classes for f in dataclasses.fields(c) if not f.init}
    name = next(iter(tags.values()))[0]

    def read(data: Mapping[str, Any]) -> Any:
        if (found := tags.get(data[name])) is None:
            raise ValueError(f"unknown {name} {data[name]!r} (not one of {sorted(map(str, tags))})")
        return decode(found[1], data)

    return read
