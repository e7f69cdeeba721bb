"""The spawn tool: the model composes its own workers from a pool the host allows.

The host sets the policy (tool pool, model allowlist, worker types, live
workers, background mode); the model picks each worker's name, instructions,
task, tools and model within it. A call outside the policy gets an in-band
answer saying what is allowed; an impossible policy is a `ConfigurationError`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pydantic

from ..agent import Agent
from ..errors import ConfigurationError
from ..loop import DEFAULT_MAX_ROUNDS
from ..models import Model
from ..runtime import Runtime
from ..tools import ApprovalRule, Tool, ToolError, ToolLike, ToolOutput, as_tool
from ._children import (
    CHILD_LEASE,
    DEFAULT_MAX_ANSWER_CHARS,
    check_answer_cap,
    child_slot,
    create_child,
    run_inline,
)
from ._dispatch import ChildSpec, Dispatcher, registration
from ._subagent import check_child_tools, check_on_approval
from ._tool import DelegationTool

if TYPE_CHECKING:
    from ..tools import ToolContext

SPAWN_TOOL = "spawn_agent"


@dataclass(frozen=True, slots=True)
class WorkerType:
    """A predefined kind of worker: base instructions, default tools and model."""

    name: str
    instructions: str
    tools: tuple[str, ...] = ()
    model: str | None = None
    description: str = ""


@dataclass(frozen=True, slots=True)
class _Worker:
    """One spawn's worker, within the policy: what it is told and may use."""

    name: str
    task: str
    instructions: str | None
    tools: tuple[str, ...]
    model: str
    type: WorkerType | None
    background: bool

    @property
    def role(self) -> str:
        """How its delegation record names its kind."""
        return self.type.name if self.type else "worker"


def _spec_of(model: Model | str) -> str:
    return model if isinstance(model, str) else model.spec


class Spawner:
    """Builds the `spawn_agent` tool (see the module docstring).

    `model` is the workers' default model, `tools` the pool, `models` the
    other models allowed, `types` predefined workers, `max_children` how many
    may be live at once per parent session, `dispatcher` enables
    `mode="background"`, `needs_approval` gates the spawn; `on_approval` and
    `max_answer_chars` are `SubAgent`'s. Workers run without the parent's `deps`.
    """

    def __init__(
        self,
        model: Model | str,
        tools: Iterable[ToolLike] = (),
        models: Iterable[Model | str] = (),
        types: Iterable[WorkerType] | Mapping[str, WorkerType] = (),
        max_children: int = 4,
        dispatcher: Dispatcher | None = None,
        *,
        needs_approval: ApprovalRule = False,
        instructions: str | None = None,
        max_rounds: int | None = DEFAULT_MAX_ROUNDS,
        name: str = SPAWN_TOOL,
        on_approval: str = "deny",
        max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS,
    ) -> None:
        self.on_approval = check_on_approval("spawn pool", on_approval)
        self.max_answer_chars = check_answer_cap("spawn pool", max_answer_chars)
        pool: dict[str, Tool] = {}
        for t in (as_tool(x) for x in tools):
            if isinstance(t, DelegationTool):
                raise ConfigurationError(
                    f"spawn pool: tool {t.name!r} delegates; the spawn tool cannot be in its own pool "
                    "and workers cannot delegate further"
                )
            if t.name in pool:
                raise ConfigurationError(f"spawn pool: two tools named {t.name!r}")
            pool[t.name] = t
        check_child_tools("spawn pool", pool.values(), on_approval)
        if max_children < 1:
            raise ConfigurationError("max_children must be at least 1")
        type_map: dict[str, WorkerType] = {}
        for wt in types.values() if isinstance(types, Mapping) else types:
            if wt.name in type_map:
                raise ConfigurationError(f"two worker types named {wt.name!r}")
            absent = [t for t in wt.tools if t not in pool]
            if absent:
                raise ConfigurationError(
                    f"worker type {wt.name!r} names tools not in the pool: {absent}"
                )
            type_map[wt.name] = wt
        self.model = model
        self.pool = pool
        self._models: dict[str, Model | str] = {_spec_of(model): model}
        for m in models:
            self._models[_spec_of(m)] = m
        for wt in type_map.values():
            if wt.model is not None and wt.model not in self._models:
                raise ConfigurationError(
                    f"worker type {wt.name!r} uses model {wt.model!r}, not in the allowlist"
                )
        self.types = type_map
        self.max_children = max_children
        self.dispatcher = dispatcher
        self.needs_approval = needs_approval
        self.instructions = instructions
        self.max_rounds = max_rounds
        self.name = name
        self._arguments = self._arguments_model()

    def _arguments_model(self) -> type[pydantic.BaseModel]:
        """The spawn tool's arguments under this policy (the schema shown and validated)."""
        types = "; ".join(
            f"{t.name} ({t.description or t.instructions[:60]})" for t in self.types.values()
        )
        mode = "inline (wait for the answer)"
        if self.dispatcher is not None:
            mode += " or background (a receipt now, the report later)"
        return pydantic.create_model(
            "spawn_arguments",
            __config__=pydantic.ConfigDict(extra="forbid"),
            name=(
                str,
                pydantic.Field(description="A short name for the worker (used to find it later)."),
            ),
            instructions=(
                str,
                pydantic.Field("", description="The worker's instructions (its system prompt)."),
            ),
            task=(
                str,
                pydantic.Field(description="The complete task: the worker sees nothing else."),
            ),
            tools=(
                list[str],
                pydantic.Field(
                    default_factory=list,
                    description="Tools to grant, from: " + (", ".join(self.pool) or "(none)"),
                ),
            ),
            model=(str, pydantic.Field("", description="Model, from: " + ", ".join(self._models))),
            mode=(str, pydantic.Field("", description=mode)),
            type=(
                str,
                pydantic.Field("", description="A predefined worker type: " + (types or "(none)")),
            ),
        )

    def tool(self) -> Tool:
        """A `spawn_agent` tool (a new one each call, kept by the agent given it)."""
        description = (
            "Start a worker agent with a clean context for a focused task; only its final answer comes back. "
            f"At most {self.max_children} workers may be live at once."
        )
        return DelegationTool(
            self.name,
            description,
            self._arguments,
            self._spawn,
            needs_approval=self.needs_approval,
        )

    def _policy_error(self, message: str) -> ToolError:
        return ToolError(f"{self.name}: {message}")

    async def _spawn(self, runtime: Runtime, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        worker = self._worker(args)
        model = runtime.resolve_model(self._models[worker.model])
        agent = Agent(worker.name, model, worker.instructions, [self.pool[t] for t in worker.tools])
        child_id = uuid.uuid4().hex
        # Counted among the session's live workers, or refused when
        # `max_children` are live (atomically, across processes too).
        registry = runtime.background.registry
        mode = "background" if worker.background else "inline"
        activity = registration(child_id, worker.name, worker.task, ctx.run_id, mode)
        lease = CHILD_LEASE * (10 if worker.background else 1)
        if not await registry.add(ctx.session_id, activity, lease, self.max_children):
            live = [
                a.metadata.get("name", a.id[:8])
                for a in await registry.list(ctx.session_id)
                if a.kind == "subagent"
            ]
            raise self._policy_error(
                f"at most {self.max_children} workers may be live at once; live now: {', '.join(map(str, live))}. "
                "Wait for one to finish or stop one before spawning another."
            )
        if worker.background:
            return await self._spawn_background(runtime, ctx, worker, model, agent, child_id)
        return await self._spawn_inline(runtime, ctx, worker, agent, child_id)

    def _worker(self, args: dict[str, Any]) -> _Worker:
        """The worker the call asks for, or a `ToolError` saying what the policy allows."""
        task = args["task"].strip()
        if not task:
            raise self._policy_error("'task' is empty; give the worker its complete task")
        wtype: WorkerType | None = None
        if args["type"]:
            wtype = self.types.get(args["type"])
            if wtype is None:
                allowed = ", ".join(self.types) or "(none defined)"
                raise self._policy_error(
                    f"unknown worker type {args['type']!r}; available types: {allowed}"
                )
        tools = tuple(args["tools"] or (wtype.tools if wtype else ()))
        unknown = [t for t in tools if t not in self.pool]
        if unknown:
            raise self._policy_error(
                f"tool(s) {', '.join(map(repr, unknown))} are not in the pool; allowed: {', '.join(self.pool) or '(none)'}"
            )
        model = args["model"] or (wtype.model if wtype and wtype.model else _spec_of(self.model))
        if model not in self._models:
            raise self._policy_error(
                f"model {model!r} is not allowed; allowed: {', '.join(self._models)}"
            )
        mode = args["mode"] or "inline"
        if mode not in ("inline", "background"):
            raise self._policy_error(f"mode must be 'inline' or 'background', not {mode!r}")
        if mode == "background" and self.dispatcher is None:
            raise self._policy_error(
                "mode 'background' is not available here (no dispatcher); use 'inline'"
            )
        parts = (self.instructions, wtype.instructions if wtype else None, args["instructions"])
        return _Worker(
            name=args["name"].strip() or "worker",
            task=task,
            instructions="\n\n".join(p for p in parts if p) or None,
            tools=tools,
            model=model,
            type=wtype,
            background=mode == "background",
        )

    async def _spawn_inline(
        self, runtime: Runtime, ctx: ToolContext, worker: _Worker, agent: Agent, child_id: str
    ) -> ToolOutput:
        """Run the worker inside this call, to its end."""
        background = runtime.background

        async def keep_registered() -> None:
            await background.lifecycle.alive(ctx.session_id, child_id, lease=CHILD_LEASE)

        try:
            async with child_slot(runtime, ctx):
                child = await create_child(
                    runtime,
                    ctx,
                    agent,
                    name=worker.name,
                    task=worker.task,
                    mode="inline",
                    role=worker.role,
                    session_id=child_id,
                )
                outcome = await run_inline(
                    runtime,
                    ctx,
                    child,
                    worker.task,
                    name=worker.name,
                    role=worker.role,
                    max_rounds=self.max_rounds,
                    also_renew=keep_registered,
                )
        finally:
            await background.lifecycle.discard(ctx.session_id, child_id)
        return outcome.to_tool_output(self.max_answer_chars)

    async def _spawn_background(
        self,
        runtime: Runtime,
        ctx: ToolContext,
        worker: _Worker,
        model: Model,
        agent: Agent,
        child_id: str,
    ) -> ToolOutput:
        """Hand the worker to the dispatcher; a receipt now, its report as a notice later."""
        assert self.dispatcher is not None  # `_worker` refuses background without one
        background = runtime.background
        # An in-process worker rebuilds the child from this runtime's registries.
        for t in worker.tools:
            runtime.tools.setdefault(t, self.pool[t])
        runtime.register_model(model)
        spec = ChildSpec(
            child_session_id=child_id,
            parent_session_id=ctx.session_id,
            name=worker.name,
            task=worker.task,
            instructions=worker.instructions,
            tools=worker.tools,
            model=model.spec,
            type=worker.type.name if worker.type else None,
            max_rounds=self.max_rounds,
            parent_run_id=ctx.run_id,
            # This runs inside the spawn call's span: the child continues it.
            traceparent=runtime.observer.current_traceparent(),
            budget=ctx.controls.tree.to_dict() if ctx.controls.tree is not None else None,
            on_approval=self.on_approval,
            max_answer_chars=self.max_answer_chars,
        )
        try:
            await create_child(
                runtime,
                ctx,
                agent,
                name=worker.name,
                task=worker.task,
                mode="background",
                role=worker.role,
                spec=spec.to_dict(),
                session_id=child_id,
            )
            notices = background.notices_for(ctx.run_id)
            if notices is not None:
                notices.mark_started(child_id)
            bind = getattr(self.dispatcher, "bind", None)
            if callable(bind):
                bind(runtime)
            await self.dispatcher.dispatch(spec)
        except BaseException:
            await background.lifecycle.discard(ctx.session_id, child_id)
            raise
        receipt = {
            "id": child_id,
            "name": worker.name,
            "status": "queued",
            "note": "Running in the background; its report arrives as a notice at a later round.",
        }
        return ToolOutput(json.dumps(receipt))
