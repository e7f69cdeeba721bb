"""The Gemini wire of `FakeServer`: `generateContent` and `streamGenerateContent?alt=sse`.

Gemini names the model and whether to stream in the path, on the Gemini API
and Vertex AI alike (`gemini_route` reads both). An answer is one candidate
whose parts are the text and the function calls, with `usageMetadata`; a
stream is one chunk per text delta or call, then one with the finish reason
and final counts. Errors have Google's shape, a retry hint as `RetryInfo`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..messages import Usage
from ._fake_wire import ErrorReply, FakeReply, Json, StreamError, _Call, _dumps

_ROUTE = re.compile(
    r"/v1(?:beta1?)?/(?:[^?]*/)?models/([^/:?]+):(generateContent|streamGenerateContent)"
)

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_MESSAGES = {
    400: "Request contains an invalid argument.",
    401: "API key not valid. Please pass a valid API key.",
    403: "The caller does not have permission.",
    404: "Requested entity was not found.",
    429: "Resource has been exhausted (e.g. check quota).",
    500: "An internal error has occurred.",
    503: "The model is overloaded. Please try again later.",
}
# What other wires call their stream errors, as Gemini's codes.
_STREAM_CODES = {"overloaded_error": 503, "server_error": 500, "api_error": 500}
_FINISH = {
    "end_turn": "STOP",
    "tool_use": "STOP",
    "stop_sequence": "STOP",
    "max_tokens": "MAX_TOKENS",
}


def gemini_route(path: str) -> tuple[str, bool] | None:
    """`(model, streams)` for a Gemini endpoint's path, else None."""
    found = _ROUTE.fullmatch(path)
    if found is None:
        return None
    return found[1], found[2] == "streamGenerateContent"


def _frame(data: Json) -> bytes:
    # Gemini ends each event with CRLF CRLF.
    return b"data: " + _dumps(data) + b"\r\n\r\n"


class GeminiWire:
    """Gemini's `generateContent` (see the module's docstring)."""

    provider = "google"
    retry_in_body = True

    @staticmethod
    def usage(u: Usage, *, so_far: int | None = None) -> Json:
        """`usageMetadata` for `u`; `so_far` answer tokens instead, mid-stream."""
        candidates = u.output_tokens - u.reasoning_tokens
        if so_far is not None:
            candidates = min(so_far, candidates)
        meta: Json = {
            "promptTokenCount": u.input_tokens,
            "candidatesTokenCount": candidates,
            "totalTokenCount": u.input_tokens + candidates,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": u.input_tokens}],
        }
        if so_far is None:
            if u.reasoning_tokens:
                meta["thoughtsTokenCount"] = u.reasoning_tokens
            if u.cache_read_tokens:
                meta["cachedContentTokenCount"] = u.cache_read_tokens
            meta["totalTokenCount"] = u.input_tokens + u.output_tokens
        return meta

    @staticmethod
    def _calls(r: FakeReply, c: _Call) -> list[Json]:
        parts = []
        for i, t in enumerate(r.tool_calls):
            try:
                args: Any = json.loads(t.arguments)
            except ValueError:
                args = t.arguments  # not JSON: sent as it is, for the client to refuse
            call = {"name": t.name, "args": args, "id": c.tool_id("fc_", i, t)}
            parts.append({"functionCall": call})
        return parts

    @staticmethod
    def _chunk(c: _Call, parts: list[Json], meta: Json, finish: str | None = None) -> Json:
        candidate: Json = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish is not None:
            candidate["finishReason"] = finish
        return {
            "candidates": [candidate],
            "usageMetadata": meta,
            "modelVersion": c.model,
            "responseId": f"fake{c.number}",
        }

    def body(self, r: FakeReply, c: _Call) -> Json:
        parts: list[Json] = []
        if r.text is not None or not r.tool_calls:
            parts.append({"text": r.full_text})
        parts += self._calls(r, c)
        finish = _FINISH.get(r.resolved_stop(), "STOP")
        return self._chunk(c, parts, self.usage(r.resolved_usage()), finish)

    def events(self, r: FakeReply, c: _Call) -> list[bytes]:
        usage = r.resolved_usage()
        parts = [{"text": d} for d in r.text or ()] + self._calls(r, c)
        frames = [
            _frame(self._chunk(c, [part], self.usage(usage, so_far=n + 1)))
            for n, part in enumerate(parts)
        ]
        finish = _FINISH.get(r.resolved_stop(), "STOP")
        frames.append(_frame(self._chunk(c, [{"text": ""}], self.usage(usage), finish)))
        return frames

    def error_body(self, e: ErrorReply, retry_after: str | None) -> Json:
        error: Json = {
            "code": e.status,
            "message": e.message or _MESSAGES.get(e.status, "Unknown error."),
            "status": e.error_type or _STATUS.get(e.status, "UNKNOWN"),
        }
        if retry_after is not None:
            retry = {
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": f"{retry_after}s",
            }
            error["details"] = [retry]
        return {"error": error}

    def stream_error(self, c: _Call, e: StreamError, seq: int) -> bytes:
        code = _STREAM_CODES.get(e.error_type, 500)
        if e.error_type in _STATUS.values():
            code = next(k for k, v in _STATUS.items() if v == e.error_type)
        return _frame({"error": {"code": code, "message": e.message, "status": _STATUS[code]}})
