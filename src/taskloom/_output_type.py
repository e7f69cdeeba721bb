"""An agent's output type, made usable: the JSON schema a model is asked for,
a name for it, and the checks a final answer passes.

A value apart from `Agent`, so the agent stays a specification and the loop
(which asks for the answer), the log (which reads a finished run's output
back) and the MCP server (which announces it) read the one check.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._schema import check as check_schema
from .errors import ConfigurationError

if TYPE_CHECKING:
    import pydantic


class OutputType:
    """The output type `spec` of agent `owner`: a type pydantic validates (a
    pydantic model, a dataclass, a TypedDict, `list[int]`, ...) or a JSON
    schema dict. Its JSON schema and validator are built on first use, once:
    making an agent does no schema work. A type pydantic cannot validate
    raises `ConfigurationError` then."""

    __slots__ = ("_adapter", "_json_schema", "owner", "spec")

    def __init__(self, spec: type[Any] | Mapping[str, Any], owner: str) -> None:
        self.spec = spec
        self.owner = owner
        self._adapter: pydantic.TypeAdapter[Any] | None = None
        self._json_schema: Mapping[str, Any] | None = None

    def __repr__(self) -> str:
        return f"OutputType({self.spec!r})"

    @property
    def json_schema(self) -> Mapping[str, Any]:
        """The output type as JSON schema."""
        if self._json_schema is None:
            spec = self.spec
            self._json_schema = (
                dict(spec) if isinstance(spec, Mapping) else self._validator().json_schema()
            )
        return self._json_schema

    @property
    def name(self) -> str:
        """A name for the structured output (the schema's title or the class name)."""
        spec = self.spec
        if isinstance(spec, Mapping):
            return str(spec.get("title") or "output")
        return getattr(spec, "__name__", "output")

    def parse(self, text: str) -> Any:
        """A final answer's text (JSON, fenced or not) validated as the output
        type; ValueError says what is wrong."""
        raw = text.strip()
        if raw.startswith("```"):  # fenced
            raw = raw.split("\n", 1)[1] if "\n" in raw else raw[3:]
            if raw.rstrip().endswith("```"):
                raw = raw.rstrip()[:-3]
        raw = raw.strip()
        if isinstance(self.spec, Mapping):
            try:
                value = json.loads(raw)
            except ValueError as exc:
                raise ValueError(f"not valid JSON ({exc})") from None
            check_schema(value, self.spec)
            return value
        import pydantic

        try:
            return self._validator().validate_json(raw)
        except pydantic.ValidationError as exc:
            raise ValueError(validation_problems(exc)) from None

    def validate(self, value: object) -> Any:
        """A JSON value (a final-answer tool's arguments, a recorded output)
        validated as the output type; ValueError says what is wrong."""
        if isinstance(self.spec, Mapping):
            check_schema(value, self.spec)
            return value
        import pydantic

        try:
            return self._validator().validate_python(value)
        except pydantic.ValidationError as exc:
            raise ValueError(validation_problems(exc)) from None

    def _validator(self) -> pydantic.TypeAdapter[Any]:
        if self._adapter is None:
            # Imported here: `import taskloom` does not pay for pydantic's core.
            import pydantic

            try:
                self._adapter = pydantic.TypeAdapter(self.spec)  # type: ignore[arg-type]
            except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError) as exc:
                raise ConfigurationError(
                    f"agent {self.owner!r}: output_type {self.spec!r} cannot be validated: {exc}"
                ) from None
        return self._adapter


def validation_problems(exc: Any, whole: str = "(value)") -> str:
    """A pydantic `ValidationError`'s problems in one line, each at its place
    (`whole` names the place of a problem with the value itself)."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or whole}: {e['msg']}"
        for e in exc.errors(include_url=False)
    )
