"""The spawn tool: the model composes its own workers from a pool the host allows.

The host decides what is possible (the tool pool, the model allowlist,
predefined worker types, how many workers may be live, whether background
mode exists); the model decides, within that, each worker's name,
instructions, task, tools and model. Asking for something outside the policy
gets an in-band answer that says exactly what is allowed; configuring an
impossible policy raises `ConfigurationError` at construction.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..agent import Agent
from ..background import BackgroundActivity, BackgroundService
from ..errors import ConfigurationError
from ..models import Model
from ..tools import ApprovalRule, Tool, ToolError, ToolLike, ToolOutput, as_tool
from ._children import (
    CHILD_LEASE,
    child_slot,
    create_child,
    host_runtime,
    run_inline,
    summary,
)
from ._dispatch import ChildSpec, Dispatcher
from ._subagent import DelegationTool, check_child_tools, check_on_approval

if TYPE_CHECKING:
    from ..tools import ToolContext

__all__ = ["Spawner", "WorkerType"]

SPAWN_TOOL = "spawn_agent"


@dataclass(frozen=True, slots=True)
class WorkerType:
    """A predefined kind of worker: base instructions, default tools and model."""

    name: str
    instructions: str
    tools: tuple[str, ...] = ()
    model: str | None = None
    description: str = ""


def _spec_of(model: Model | str) -> str:
    return model if isinstance(model, str) else model.spec


class Spawner:
    """Builds the `spawn_agent` tool (see the module docstring).

    `model` is the workers' default model, `tools` the pool they may be
    granted, `models` the other models they may use, `types` predefined
    worker definitions, `max_children` how many may be live at once per
    parent session (enforced atomically), `dispatcher` enables
    `mode="background"`. `needs_approval` gates the spawn itself. Workers
    run without the parent run's `deps` (`ctx.deps` is None in their tools).
    `on_approval="escalate"` lets the pool hold tools that need approval: a
    background worker's gated call is escalated to the parent's people (see
    `SubAgent`) instead of being refused.
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
        max_rounds: int | None = None,
        name: str = SPAWN_TOOL,
        on_approval: str = "deny",
    ) -> None:
        self.on_approval = check_on_approval("spawn pool", on_approval)
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
        self._tool: DelegationTool | None = None

    # ------------------------------------------------------------ the tool

    def _schema(self) -> dict[str, Any]:
        props: dict[str, Any] = {
            "name": {
                "type": "string",
                "description": "A short name for the worker (used to find it later).",
            },
            "instructions": {
                "type": "string",
                "description": "The worker's instructions (its system prompt).",
            },
            "task": {
                "type": "string",
                "description": "The complete task: the worker sees nothing else.",
            },
            "tools": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Tools to grant, from: " + (", ".join(self.pool) or "(none)"),
            },
            "model": {"type": "string", "description": "Model, from: " + ", ".join(self._models)},
            "mode": {
                "type": "string",
                "description": "inline (wait for the answer)"
                + (
                    " or background (a receipt now, the report later)"
                    if self.dispatcher is not None
                    else ""
                ),
            },
        }
        props["type"] = {
            "type": "string",
            "description": "A predefined worker type: "
            + (
                "; ".join(
                    f"{t.name} ({t.description or t.instructions[:60]})"
                    for t in self.types.values()
                )
                or "(none)"
            ),
        }
        return {
            "type": "object",
            "properties": props,
            "required": ["name", "task"],
            "additionalProperties": False,
        }

    def tool(self) -> Tool:
        """The `spawn_agent` tool (built once)."""
        if self._tool is None:
            description = (
                "Start a worker agent with a clean context for a focused task; only its final answer comes back. "
                f"At most {self.max_children} workers may be live at once."
            )
            self._tool = DelegationTool(
                self.name,
                description,
                self._schema(),
                self._spawn,
                needs_approval=self.needs_approval,
            )
        return self._tool

    def _policy_error(self, message: str) -> ToolError:
        return ToolError(f"{self.name}: {message}")

    async def _spawn(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        name = str(args.get("name") or "").strip() or "worker"
        task = str(args.get("task") or "").strip()
        if not task:
            raise self._policy_error("'task' is empty; give the worker its complete task")
        wtype: WorkerType | None = None
        if args.get("type"):
            wtype = self.types.get(str(args["type"]))
            if wtype is None:
                allowed = ", ".join(self.types) or "(none defined)"
                raise self._policy_error(
                    f"unknown worker type {args['type']!r}; available types: {allowed}"
                )
        requested = args.get("tools")
        tool_names = list(requested) if requested else list(wtype.tools if wtype else ())
        unknown = [t for t in tool_names if t not in self.pool]
        if unknown:
            raise self._policy_error(
                f"tool(s) {', '.join(map(repr, unknown))} are not in the pool; allowed: {', '.join(self.pool) or '(none)'}"
            )
        model_spec = str(
            args.get("model") or (wtype.model if wtype and wtype.model else _spec_of(self.model))
        )
        if model_spec not in self._models:
            raise self._policy_error(
                f"model {model_spec!r} is not allowed; allowed: {', '.join(self._models)}"
            )
        mode = str(args.get("mode") or "inline")
        if mode not in ("inline", "background"):
            raise self._policy_error(f"mode must be 'inline' or 'background', not {mode!r}")
        if mode == "background" and self.dispatcher is None:
            raise self._policy_error(
                "mode 'background' is not available here (no dispatcher); use 'inline'"
            )
        instructions = (
            "\n\n".join(
                p
                for p in (
                    self.instructions,
                    wtype.instructions if wtype else None,
                    args.get("instructions"),
                )
                if p
            )
            or None
        )
        runtime = host_runtime(ctx)
        background = BackgroundService.of(runtime)
        model = runtime.resolve_model(self._models[model_spec])
        agent = Agent(name, model, instructions, [self.pool[t] for t in tool_names])
        child_id = uuid.uuid4().hex
        # The cap is a per-kind cap in the parent's activity registry, checked
        # atomically with the insert: concurrent spawns, even from several
        # processes, never exceed it.
        activity = BackgroundActivity(
            child_id,
            "subagent",
            f"{name}: {summary(task, 80)}",
            time.time(),
            ctx.run_id,
            {"name": name, "mode": mode},
        )
        lifecycle = background.lifecycle
        registry_lease = CHILD_LEASE * (10 if mode == "background" else 1)
        if not await background.registry.add(
            ctx.session_id, activity, registry_lease, self.max_children
        ):
            live = [
                a.metadata.get("name", a.id[:8])
                for a in await background.registry.list(ctx.session_id)
                if a.kind == "subagent"
            ]
            raise self._policy_error(
                f"at most {self.max_children} workers may be live at once; live now: {', '.join(map(str, live))}. "
                "Wait for one to finish or stop one before spawning another."
            )
        role = wtype.name if wtype else "worker"
        try:
            if mode == "background":
                return await self._dispatch(
                    ctx, agent, child_id, name, task, instructions, tool_names, model, role, wtype
                )

            async def keep_registered() -> None:
                await lifecycle.alive(ctx.session_id, child_id, lease=CHILD_LEASE)

            async with child_slot(ctx):
                child = await create_child(
                    ctx, agent, name=name, task=task, mode="inline", role=role, session_id=child_id
                )
                outcome = await run_inline(
                    ctx,
                    child,
                    task,
                    name=name,
                    role=role,
                    max_rounds=self.max_rounds,
                    also_renew=keep_registered,
                )
        finally:
            if mode == "inline":
                await lifecycle.discard(ctx.session_id, child_id)
        return outcome.to_tool_output()

    async def _dispatch(
        self,
        ctx: ToolContext,
        agent: Agent,
        child_id: str,
        name: str,
        task: str,
        instructions: str | None,
        tool_names: list[str],
        model: Model,
        role: str,
        wtype: WorkerType | None,
    ) -> ToolOutput:
        runtime = host_runtime(ctx)
        background = BackgroundService.of(runtime)
        # An in-process worker rebuilds the child from this runtime's registries.
        for t in tool_names:
            runtime.tools.setdefault(t, self.pool[t])
        runtime.register_model(model)
        spec = ChildSpec(
            child_session_id=child_id,
            parent_session_id=ctx.session_id,
            name=name,
            task=task,
            instructions=instructions,
            tools=tuple(tool_names),
            model=model.spec,
            type=wtype.name if wtype else None,
            max_rounds=self.max_rounds,
            parent_run_id=ctx.run_id,
            # This runs inside the spawn call's span: the child continues it.
            traceparent=runtime.observer.current_traceparent(),
            budget=ctx.controls.tree.to_dict() if ctx.controls.tree is not None else None,
            on_approval=self.on_approval,
        )
        try:
            await create_child(
                ctx,
                agent,
                name=name,
                task=task,
                mode="background",
                role=role,
                spec=spec.to_dict(),
                session_id=child_id,
            )
            notices = background.notices_for(ctx.run_id)
            if notices is not None:
                notices.mark_started(child_id)
            assert self.dispatcher is not None
            bind = getattr(self.dispatcher, "bind", None)
            if callable(bind):
                bind(runtime)
            await self.dispatcher.dispatch(spec)
        except BaseException:
            await background.lifecycle.discard(ctx.session_id, child_id)
            raise
        receipt = {
            "id": child_id,
            "name": name,
            "status": "queued",
            "note": "Running in the background; its report arrives as a notice at a later round.",
        }
        return ToolOutput(json.dumps(receipt))
