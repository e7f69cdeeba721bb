"""A round's request: built from the log's view, compacted first when it grew
too long, and compacted once more when the provider still finds it too long."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from ..errors import ContextWindowExceeded
from ..messages import Message
from ..models import Model, ModelRequest, ModelResponse
from ..results import RunStatus
from ._ask import ModelAsker
from ._compact import Compactor
from ._port import Delivery
from ._result import EndRun
from ._scope import RunState

__all__ = ["Requests"]


class Requests:
    """The requests of one run's rounds (step 4 of a round)."""

    __slots__ = ("_asker", "_run", "compactor", "memo")

    def __init__(self, run: RunState) -> None:
        self._run = run
        asker = self._asker = ModelAsker(run)
        policy = run.agent.compaction
        # An agent without a compaction policy sends the whole view, and has nothing to decide.
        self.compactor = None if policy is None else Compactor(policy, run.agent, run.ports, asker)
        # Adapters keep their wire encoding of this run's messages here.
        self.memo: dict[Any, Any] = {}

    def build(self, model: Model, delivery: Delivery | None) -> ModelRequest:
        """The request to `model` for the next round, with `delivery`'s notices last."""
        # A view, not a copy: copying the history made every round cost in
        # proportion to the session's length.
        run = self._run
        messages = run.log.view(Message.user(delivery.text) if delivery is not None else None)
        agent = run.agent
        specs = run.ports.tools.tool_specs
        output_schema, output_tool = run.output.ask(model)
        return ModelRequest(
            messages=messages,
            system=agent.instructions,
            tools=(*specs, *output_tool) if output_tool else specs,
            settings=run.ports.models.settings,
            output_schema=output_schema,
            output_name="output" if agent.output is None else agent.output.name,
            memo=self.memo,
        )

    def ask(self, delivery: Delivery | None) -> Awaitable[ModelResponse]:
        """The model's answer to the next round's request (compacting the view
        first if it grew too long), awaited."""
        compactor = self.compactor
        if compactor is None:
            model = self._run.ports.models.model
            return self._asker.ask(model, self.build(model, delivery))
        return self._ask_compacting(compactor, delivery)

    async def _ask_compacting(
        self, compactor: Compactor, delivery: Delivery | None
    ) -> ModelResponse:
        models = self._run.ports.models
        extra = delivery.text if delivery is not None else ""
        await compactor.before_request(extra)
        for attempt in (1, 2):
            chars = compactor.request_chars(extra)
            model = models.model
            try:
                response = await self._asker.ask(model, self.build(model, delivery))
            except ContextWindowExceeded as exc:
                # The provider counted what we estimated: compact once, retry once.
                if attempt == 2 or not await compactor.compact_to_fit():
                    raise EndRun(RunStatus.FAILED, _overflow_error(compactor, exc)) from None
                continue
            u = response.usage
            compactor.estimate.observe(
                chars, u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
            )
            return response
        raise AssertionError("unreachable")


def _overflow_error(compactor: Compactor, exc: ContextWindowExceeded) -> str:
    window = compactor.window()
    size = compactor.tokens()
    limit = f"the model's window of {window} tokens" if window else "the model's window"
    return (
        f"the request (about {size} tokens) does not fit {limit}, even after compacting "
        f"({exc}); lower Compaction(keep_recent=...), shorten tool outputs "
        "(max_output_chars), or use a model with a larger window"
    )
