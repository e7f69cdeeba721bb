"""Ceilings for a whole delegation tree (`Budget`), enforced across processes
(docs/concepts/delegation.md, "Tree budgets").

Each model request charges its worst case up front (an input bound of a
token a byte, which no tokenizer exceeds, plus its `max_tokens`) and gives
back the difference once its usage is in; the ledger's charge is atomic, so
concurrent runs cannot pass a ceiling together. Reported usage is clamped
where it enters accounting (`within_range`) so a refund never exceeds its
charge and every sum fits the ledgers' 64-bit columns.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .._extras import install_command
from .._run_controls import BudgetLedger
from ..errors import ConfigurationError
from ..messages import ImageBlock, Message, TextBlock, ToolCall, ToolResult, Usage
from ..models import ModelRequest, ModelResponse, ModelSettings
from ..results import NANO, BudgetLeft

logger = logging.getLogger("taskloom")

MIN_ANSWER_TOKENS = 256
"""A request is not sent with fewer output tokens than this (or than its
own `max_tokens`, if smaller): the run ends BUDGET_EXHAUSTED instead."""

MAX_REPORTED_TOKENS = 10**12
"""The most tokens one figure of one response's usage is counted as (no
context window is within a factor of 10,000 of it); a figure past it is an
anomaly, logged and counted as this."""

MAX_CEILING_TOKENS = 10**15
"""The largest `Budget(tokens=...)` (and `max_output_tokens`) taken."""

MAX_CEILING_USD = 10**6
"""The largest `Budget(usd=...)` taken, in dollars."""

MAX_PRICE = 10**6
"""The largest `Price` taken, in dollars per million tokens (a dollar a token)."""

_PER_MESSAGE = 16  # tokens of framing a provider adds around each message, at most


@dataclass(frozen=True, slots=True)
class Price:
    """A model's price in US dollars per million tokens: `input`, `output`,
    and `cached_input` (cache reads; None: as `input`). Each is a finite
    number from 0 to `MAX_PRICE`, or a `ConfigurationError` when made."""

    input: float
    output: float
    cached_input: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input"):
            value = getattr(self, name)
            if value is not None and not _number_within(value, 0, MAX_PRICE):
                raise ConfigurationError(
                    f"Price({name}={value!r}) must be a finite number of dollars per million "
                    f"tokens, from 0 to {MAX_PRICE:,}"
                )

    def nano_usd(self, usage: Usage, provider: str = "") -> int:
        """What `usage` costs at this price, in nano-dollars (rounded up).
        `provider` says how to read it (see `Usage`): Anthropic's input
        excludes cache reads, every other provider's includes them."""
        cached = self.input if self.cached_input is None else self.cached_input
        dollars_per_mtok = (
            _uncached_input(usage, provider) * self.input
            + usage.cache_read_tokens * cached
            + usage.cache_write_tokens * self.input
            + usage.output_tokens * self.output
        )
        return math.ceil(dollars_per_mtok * 1000)  # 1e9 nano-dollars / 1e6 tokens


@dataclass(frozen=True, slots=True)
class Budget:
    """Ceilings for a root run and every run under it, in any process:
    `tokens` (input + output, as `Usage.total_tokens` counts them) and `usd`
    (priced by `prices`, by model name, then by the `genai-prices` table of
    the `prices` extra). At least one ceiling is given.

    `max_output_tokens` is what a request that sets no `max_tokens` is
    allowed to write (and charged for in advance); a request's `max_tokens`
    is lowered to what the tree has left. A model with no known price under
    a `usd` ceiling is a `ConfigurationError` at its first request, never a
    silent zero. A ceiling that cannot be enforced is one when the budget is
    made: `tokens` and `max_output_tokens` are integers from 1 to
    `MAX_CEILING_TOKENS`, `usd` a finite number above 0 and at most
    `MAX_CEILING_USD` (never nan or infinite).
    """

    tokens: int | None = None
    usd: float | None = None
    prices: Mapping[str, Price] = field(default_factory=dict)
    max_output_tokens: int = 4096

    def __post_init__(self) -> None:
        if self.tokens is None and self.usd is None:
            raise ConfigurationError("Budget needs a ceiling: tokens=, usd= or both")
        # Refused here, not at the first request: nan passes every comparison
        # a ledger makes, and inf or a huge count overflows its columns.
        for name in ("tokens", "max_output_tokens"):
            value = getattr(self, name)
            if value is not None and not (type(value) is int and 1 <= value <= MAX_CEILING_TOKENS):
                raise ConfigurationError(
                    f"Budget({name}={value!r}) must be an integer from 1 to {MAX_CEILING_TOKENS:,}"
                )
        if self.usd is not None and not (
            _number_within(self.usd, 0, MAX_CEILING_USD) and self.usd > 0
        ):
            raise ConfigurationError(
                f"Budget(usd={self.usd!r}) must be a finite number of dollars above 0 "
                f"and at most {MAX_CEILING_USD:,}"
            )
        for name, price in self.prices.items():
            if not isinstance(price, Price):
                raise ConfigurationError(f"Budget(prices={{{name!r}: ...}}) must be a Price")

    @property
    def nano_usd(self) -> int | None:
        """The dollar ceiling in nano-dollars (None: none)."""
        return None if self.usd is None else round(self.usd * NANO)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; `from_dict` turns it back into an equal value."""
        return {
            "tokens": self.tokens,
            "usd": self.usd,
            "prices": {
                k: [p.input, p.output, p.cached_input] for k, p in sorted(self.prices.items())
            },
            "max_output_tokens": self.max_output_tokens,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Budget:
        """The value `to_dict` described."""
        prices = {str(k): Price(*v) for k, v in (d.get("prices") or {}).items()}
        return cls(d.get("tokens"), d.get("usd"), prices, int(d.get("max_output_tokens", 4096)))


def _number_within(value: object, low: float, high: float) -> bool:
    """Whether `value` is an int or float (not a bool) from `low` to `high`;
    false for nan and infinities."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and low <= value <= high
    )


_FIGURES = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "requests",
)


def within_range(response: ModelResponse, model: str, session_id: str = "") -> ModelResponse:
    """`response` with every usage figure from 0 to `MAX_REPORTED_TOKENS`.

    Every response a run is given passes here before its usage is counted
    (run usage, token and tree budgets, the log), whatever wire or test
    double made it: a negative count would give back budget never charged,
    a huge one overflow a ledger's columns. An out-of-range figure is logged
    (once for the response, figures only) and counted as its bound."""
    usage = response.usage
    figures = (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.reasoning_tokens,
        usage.requests,
    )
    if min(figures) >= 0 and max(figures) <= MAX_REPORTED_TOKENS:
        return response
    wrong = {
        name: value
        for name, value in zip(_FIGURES, figures, strict=True)
        if not 0 <= value <= MAX_REPORTED_TOKENS
    }
    logger.warning(
        "session %s: model %s reported usage out of range %s; counted within 0..%d",
        session_id or "-",
        model,
        wrong,
        MAX_REPORTED_TOKENS,
    )
    kept = dict(zip(_FIGURES, (min(max(v, 0), MAX_REPORTED_TOKENS) for v in figures), strict=True))
    return replace(response, usage=Usage.from_dict({**kept, "estimated": usage.estimated}))


class BudgetSpent(Exception):
    """A request's worst case does not fit in what its tree has left."""


@dataclass(frozen=True, slots=True)
class _Charge:
    tokens: int
    nano_usd: int
    model: str
    provider: str = ""


def _excludes_cache(provider: str) -> bool:
    """Whether `provider` reports input tokens without the cached ones (see `Usage`)."""
    return provider == "anthropic"


def _uncached_input(usage: Usage, provider: str) -> int:
    if _excludes_cache(provider):
        return usage.input_tokens
    return max(usage.input_tokens - usage.cache_read_tokens, 0)


def _genai_price(model: str, usage: Usage, provider: str = "") -> int | None:
    """Nano-dollars from the `genai-prices` table, or None (unknown model, or
    the extra is not installed). The table counts cache reads within the input."""
    try:
        from genai_prices import Usage as PriceUsage
        from genai_prices import calc_price
    except ModuleNotFoundError:
        return None
    try:
        result = calc_price(
            PriceUsage(
                input_tokens=usage.input_tokens
                + (
                    usage.cache_read_tokens + usage.cache_write_tokens
                    if _excludes_cache(provider)
                    else 0
                ),
                cache_read_tokens=usage.cache_read_tokens or None,
                output_tokens=usage.output_tokens,
            ),
            model,
        )
    except LookupError:
        return None
    from decimal import Decimal  # imported here: only a priced table needs it

    return int((Decimal(result.total_price) * NANO).to_integral_value(rounding="ROUND_CEILING"))


_LAST_CAPPED: tuple[ModelSettings, int, ModelSettings] | None = None


class TreeBudget:
    """One tree's budget as a run charges it: the ledger, the tree's id and
    its `Budget`. Children share their parent's (in process) or rebuild it
    from `to_dict()` on their backend's ledger (on a worker)."""

    __slots__ = ("budget", "ledger", "tree_id")

    def __init__(self, ledger: BudgetLedger, tree_id: str, budget: Budget) -> None:
        self.ledger = ledger
        self.tree_id = tree_id
        self.budget = budget

    def _capped(self, settings: ModelSettings, max_tokens: int) -> ModelSettings:
        # A run asks with the same settings and cap request after request, and
        # an agent's runs with the same settings run after run: one copy
        # serves them all (settings are frozen values).
        global _LAST_CAPPED
        last = _LAST_CAPPED
        if last is not None and last[0] is settings and last[1] == max_tokens:
            return last[2]
        capped = replace(settings, max_tokens=max_tokens)
        _LAST_CAPPED = (settings, max_tokens, capped)
        return capped

    async def open(self) -> None:
        """Create the tree's ceilings in the ledger (a tree that exists keeps them)."""
        await self.ledger.open(self.tree_id, self.budget.tokens, self.budget.nano_usd)

    def to_dict(self) -> dict[str, Any]:
        """What a worker needs to charge this tree: its id and its budget."""
        return {"tree": self.tree_id, "budget": self.budget.to_dict()}

    def price(self, model: str, usage: Usage, provider: str = "") -> int:
        """`usage` of `model` (on `provider`'s wire) in nano-dollars; 0 without
        a dollar ceiling."""
        if self.budget.usd is None:
            return 0
        price = self.budget.prices.get(model)
        if price is not None:
            return price.nano_usd(usage, provider)
        cost = _genai_price(model, usage, provider)
        if cost is None:
            raise ConfigurationError(
                f"Budget(usd=...): no price known for model {model!r}; give it in "
                f"Budget(prices={{{model!r}: Price(input=..., output=...)}}) (dollars per "
                f"million tokens), or {install_command('prices')} for the genai-prices table"
            )
        return cost

    async def reserve(
        self, model: str, request: ModelRequest, input_bound: int, provider: str = ""
    ) -> tuple[ModelRequest, _Charge]:
        """Charge the request's worst case; the request with its `max_tokens`
        set to what was charged. Raises `BudgetSpent` when even a small
        answer does not fit.

        A request that thinks (`settings.reasoning`) keeps room for its
        thinking on top of the answer: its thinking budget, or another
        `max_output_tokens` when it names only an effort, since providers
        count thinking within `max_tokens`."""
        settings = request.settings
        reasoning = settings.reasoning
        thinking = 0
        if reasoning is not None:
            thinking = reasoning.budget_tokens or (
                self.budget.max_output_tokens if reasoning.effort else 0
            )
        # A cap past any ceiling is taken as that ceiling: charged, it fits the ledger.
        wanted = min(
            settings.max_tokens or self.budget.max_output_tokens + thinking, MAX_CEILING_TOKENS
        )
        least = min(wanted, MIN_ANSWER_TOKENS + thinking)
        charge = self._charge(model, input_bound, wanted, provider)
        if await self.ledger.charge(self.tree_id, charge.tokens, charge.nano_usd) is None:
            left = await self.ledger.left(self.tree_id)
            output = self._affordable(model, input_bound, wanted, left, provider)
            charge = self._charge(model, input_bound, output, provider)
            if (
                output < least
                or await self.ledger.charge(self.tree_id, charge.tokens, charge.nano_usd) is None
            ):
                raise BudgetSpent(self._spent(left, input_bound))
            wanted = output
        if request.settings.max_tokens != wanted:
            # Built directly: `dataclasses.replace` costs as much as the rest of the charge.
            request = ModelRequest(
                request.messages,
                request.system,
                request.tools,
                self._capped(request.settings, wanted),
                request.output_schema,
                request.output_name,
                request.memo,
            )
        return request, charge

    async def settle(self, charge: _Charge, usage: Usage | None) -> None:
        """Give back what `charge` held beyond `usage` (all of it for None: a
        request that failed), never more than the charge. Usage past the
        charge is charged too, and logged, up to the whole ceiling past it:
        more spends the tree just the same."""
        tokens = max(usage.total_tokens, 0) if usage is not None else 0
        cost = max(self.price(charge.model, usage, charge.provider), 0) if usage is not None else 0
        ceiling = self.budget
        if ceiling.tokens is not None:
            tokens = min(tokens, charge.tokens + ceiling.tokens)
        nano_usd = ceiling.nano_usd
        if nano_usd is not None:
            cost = min(cost, charge.nano_usd + nano_usd)
        if tokens > charge.tokens or cost > charge.nano_usd:
            logger.warning(
                "tree budget %s: a %s request used %d tokens against %d charged in advance",
                self.tree_id,
                charge.model,
                tokens,
                charge.tokens,
            )
        await self.ledger.refund(self.tree_id, charge.tokens - tokens, charge.nano_usd - cost)

    async def left(self) -> BudgetLeft | None:
        """What the tree has left now."""
        return await self.ledger.left(self.tree_id)

    def _charge(self, model: str, input_bound: int, output: int, provider: str) -> _Charge:
        nano_usd = self.budget.nano_usd
        if nano_usd is None:
            # No dollar ceiling: nothing to price.
            return _Charge(input_bound + output, 0, model, provider)
        cost = self.price(model, Usage(input_tokens=input_bound, output_tokens=output), provider)
        # Past the ceiling is refused however far past: a bounded figure
        # keeps a costly worst case within the ledger's columns.
        return _Charge(input_bound + output, min(cost, nano_usd + 1), model, provider)

    def _affordable(
        self, model: str, input_bound: int, wanted: int, left: BudgetLeft | None, provider: str
    ) -> int:
        """The most output tokens (up to `wanted`) that fit in `left`."""
        if left is None:
            return 0
        output = wanted
        if left.tokens is not None:
            output = min(output, left.tokens - input_bound)
        if left.nano_usd is not None and output > 0:
            # Prices rise with usage (tiers included): halve until it fits.
            lo, hi = 0, output
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self._charge(model, input_bound, mid, provider).nano_usd <= left.nano_usd:
                    lo = mid
                else:
                    hi = mid - 1
            output = lo
        return max(output, 0)

    def _spent(self, left: BudgetLeft | None, input_bound: int) -> str:
        if left is None:
            return f"tree budget {self.tree_id!r} is not in this store"
        parts = []
        if left.tokens is not None:
            parts.append(f"{max(left.tokens, 0)} tokens left of {self.budget.tokens}")
        if left.usd is not None:
            parts.append(f"${max(left.usd, 0):.4f} left of ${self.budget.usd}")
        return (
            f"the tree's budget is spent ({', '.join(parts)}; the next request needs "
            f"up to {input_bound} input tokens and an answer)"
        )


_IMAGE_TOKENS = 2000  # more than any provider bills for one image


def _leaf_bytes(value: object) -> int:
    """Bytes of what a provider tokenizes in a block: its strings and numbers,
    not the names of the fields that hold them."""
    # The usual leaves of tool arguments first: a Mapping check of a number
    # goes through the ABC machinery.
    if type(value) is str:
        return len(value.encode())
    if type(value) is int or type(value) is float:
        return len(str(value))
    if type(value) is dict:
        # Arguments are mostly flat: their scalar values counted in line.
        total = 2 * len(value)
        for v in value.values():
            kind = type(v)
            if kind is str:
                total += len(v.encode())
            elif kind is int or kind is float:
                total += len(str(v))
            else:
                total += _leaf_bytes(v)
        return total
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, Mapping):
        return sum(_leaf_bytes(v) for v in value.values()) + 2 * len(value)
    if isinstance(value, list | tuple):
        return sum(_leaf_bytes(v) for v in value) + len(value)
    return 0 if value is None else len(str(value))


def _block_bytes(block: object) -> int:
    # The common blocks directly: this runs for every new message of a run.
    if isinstance(block, TextBlock):
        return len(block.text.encode())
    if isinstance(block, ToolResult):
        return len(block.content.encode()) + len(block.tool_call_id) + len(block.tool_name)
    if isinstance(block, ToolCall):
        raw = block.raw_arguments or ""
        return len(block.id) + len(block.name) + _leaf_bytes(block.arguments) + len(raw)
    if isinstance(block, ImageBlock):
        return _IMAGE_TOKENS
    to_dict = getattr(block, "to_dict", None)
    return _leaf_bytes(to_dict()) if to_dict is not None else 0


def _message_bytes(message: Message) -> int:
    total = _PER_MESSAGE
    for block in message.blocks:
        total += _block_bytes(block)
    return total


class InputBound:
    """A bound on a run's next request's input tokens (see the module docstring)."""

    __slots__ = ("_count", "_reported", "_system", "_tail", "_tools")

    def __init__(self) -> None:
        self._count = 0
        self._tail: Message | None = None
        self._tools: object = None
        self._system: str | None = None
        self._reported = 0

    def of(self, request: ModelRequest) -> int:
        """The bound for `request` (remembered for the next one)."""
        messages: Sequence[Message] = request.messages
        count = len(messages)
        known = self._count
        if (
            self._reported
            and 0 < known <= count
            and messages[known - 1] is self._tail
            and request.tools is self._tools
            and request.system == self._system
        ):
            # By index: a slice of a view would copy the whole history.
            bound = self._reported
            for i in range(known, count):
                bound += _message_bytes(messages[i])
        else:
            bound = sum(_message_bytes(m) for m in messages) + len((request.system or "").encode())
            bound += sum(
                len(s.name) + len(s.description.encode()) + len(json.dumps(s.input_schema))
                for s in request.tools
            )
        self._count = count
        self._tail = messages[-1] if messages else None
        self._tools = request.tools
        self._system = request.system
        self._reported = 0
        return bound

    def reported(self, usage: Usage) -> None:
        """The last request's usage: the next bound starts from its input (the
        answer it wrote is among the new messages, counted by the byte)."""
        self._reported = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
