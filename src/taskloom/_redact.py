"""Credentials kept out of everything taskloom stores, records or prints:
`redact` for text a server or command produced, `safe_url` for URLs."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

REDACTED = "[redacted]"

MIN_SECRET_LENGTH = 8
"""Shorter values are placeholders (`ollama`, `none`, `test`), not credentials:
redacting them would only mangle text that happens to contain them."""

_CREDENTIAL_WORDS = (
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "auth",
    "signature",
    "credential",
    "cookie",
    "session",
    "jwt",
)
_CREDENTIAL_PARTS = frozenset({"key", "sig", "pwd", "pass"})


def is_credential_name(name: str) -> bool:
    """Whether a header, query parameter or environment variable called
    `name` carries a credential (`Authorization`, `X-API-Key`, `api_key`,
    `access_token`, `sig`, `OPENAI_API_KEY`, `DB_PASSWORD`)."""
    lowered = name.lower()
    if any(word in lowered for word in _CREDENTIAL_WORDS):
        return True
    return any(part in _CREDENTIAL_PARTS for part in re.split(r"[^a-z0-9]+", lowered))


def credentials(
    *,
    keys: Iterable[str | None] = (),
    headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    env: Mapping[str, str] | None = None,
    urls: Iterable[str] = (),
) -> tuple[str, ...]:
    """The secrets to redact, longest first: each of `keys`; each credential
    header's value (see `is_credential_name`), also without its scheme (and a
    `Basic` one decoded, with its password); each credential-named variable of
    `env`; the user-info (also as a `Basic` header), password and credential
    query values of `urls`. Values shorter than `MIN_SECRET_LENGTH` are left out."""
    found: set[str] = {k for k in keys if k}
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    for name, value in pairs:
        if is_credential_name(name):
            found.update(_header_secrets(value))
    for name, value in (env or {}).items():
        if is_credential_name(name):
            found.add(value)
    for url in urls:
        found.update(_url_secrets(url))
    return tuple(sorted((s for s in found if len(s) >= MIN_SECRET_LENGTH), key=len, reverse=True))


def _header_secrets(value: str) -> set[str]:
    value = value.strip()
    scheme, _, rest = value.partition(" ")
    rest = rest.strip()
    found = {value, rest}
    if scheme.lower() == "basic" and rest:
        try:
            decoded = base64.b64decode(rest, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return found
        found.update((decoded, decoded.partition(":")[2]))
    return found


def _url_secrets(url: str) -> set[str]:
    _, _, rest = url.partition("://")
    authority = rest.partition("/")[0].partition("?")[0]
    found: set[str] = set()
    if "@" in authority:
        userinfo = authority.rpartition("@")[0]
        plain = unquote(userinfo)
        # Clients send the user-info as a `Basic` Authorization header.
        basic = base64.b64encode(plain.encode()).decode()
        found.update((userinfo, plain, unquote(userinfo.partition(":")[2]), basic))
    query = url.partition("?")[2].partition("#")[0]
    for pair in re.split(r"[&;]", query):
        name, _, value = pair.partition("=")
        if is_credential_name(unquote(name)):
            # As sent, and as a server that decoded it would quote it.
            found.update((value, unquote(value.replace("+", " "))))
    return found


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """`text` with every occurrence of each of `secrets` replaced by
    `[redacted]` (`secrets` longest first, as `credentials` gives them)."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def mentions(value: Any, secrets: tuple[str, ...]) -> bool:
    """Whether any of `secrets` may occur in a string of `value` (JSON data,
    keys included): never False when one does, rarely True when none does.

    One C-level dump and a substring test per secret, where `redact_value`
    walks the whole value in Python: a secret with no character JSON
    escapes (quote, backslash, control characters) appears verbatim in the
    dump wherever it appears in a string; one that has such a character is
    assumed present (the caller redacts the long way)."""
    if not secrets:
        return False
    if any(map(_ESCAPED.search, secrets)):
        return True
    try:
        dumped = _DUMP.encode(value)
    except (TypeError, ValueError, RecursionError):
        return True
    return any(secret in dumped for secret in secrets)


# `json.dumps` with options builds an encoder a call; this one is built once
# (it keeps no state between calls).
_DUMP = json.JSONEncoder(ensure_ascii=False, check_circular=False)


# What json.dumps(ensure_ascii=False) does not write unchanged inside a string.
_ESCAPED = re.compile(r'["\\\x00-\x1f]')


def redact_value(value: Any, secrets: tuple[str, ...]) -> Any:
    """`value` (JSON-like: strings, dicts, lists) with `secrets` redacted from
    every string in it, keys included. Raises `RecursionError` for a value
    nested too deeply to walk."""
    if not secrets:
        return value
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {redact_value(k, secrets): redact_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v, secrets) for v in value]
    return value


class StreamRedaction:
    """`redact` for a text that arrives in pieces (a streamed answer), where a
    secret may be split across two of them: `feed` gives what of the text so
    far can be shown, holding back only its end where that could be the
    start of a secret, until the next piece or `end`. A piece costs its own
    length plus at most the longest secret's (squared, for an end that
    keeps looking like one); without secrets it is passed on as is."""

    __slots__ = ("_held", "_secrets")

    def __init__(self, secrets: tuple[str, ...]) -> None:
        self._secrets = secrets
        self._held = ""

    def feed(self, piece: str) -> str:
        """What can be shown now of the text with `piece` added (maybe "")."""
        if not self._secrets:
            return piece
        text = redact(self._held + piece, self._secrets)
        cut = len(text) - self._open(text)
        self._held = text[cut:]
        return text[:cut]

    def end(self) -> str:
        """What was held back, the text having ended."""
        held, self._held = self._held, ""
        return redact(held, self._secrets)

    def _open(self, text: str) -> int:
        """How many of the last characters of `text` a secret could start with."""
        longest = 0
        for secret in self._secrets:
            # Only the end a secret would run past can be its start.
            at = text.find(secret[0], max(len(text) - len(secret) + 1, 0))
            while at >= 0 and not secret.startswith(text[at:]):
                at = text.find(secret[0], at + 1)
            if at >= 0:
                longest = max(longest, len(text) - at)
        return longest


_PARAM = re.compile(r"(?P<sep>[?&;])(?P<name>[^=&#;\s]+)=(?P<value>[^&#;\s]*)")


def safe_url(url: str) -> str:
    """`url` as it may be stored or shown: without user-info
    (`https://me:pw@host/v1` becomes `https://host/v1`) and with the value of
    each credential query parameter replaced (`?token=abc&page=2` becomes
    `?token=[redacted]&page=2`)."""
    head, sep, rest = url.partition("://")
    if not sep:
        head, rest = "", url
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=-1)
    authority, tail = (rest, "") if cut < 0 else (rest[:cut], rest[cut:])
    path, qmark, query = tail.partition("?")
    if qmark:
        query = _PARAM.sub(_hide_param, "?" + query)[1:]
    return head + sep + authority.rpartition("@")[2] + path + qmark + query


def _hide_param(match: re.Match[str]) -> str:
    if not is_credential_name(unquote(match["name"])) or not match["value"]:
        return match[0]
    return f"{match['sep']}{match['name']}={REDACTED}"


_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>`]+")


def safe_urls(text: str) -> str:
    """`text` with every URL in it made `safe_url`."""
    return _URL.sub(lambda m: safe_url(m[0]), text)
