"""Prometheus I/O for the tuning loop: one query set, one instant, through prometheus-api-client.

Failures never raise into the loop: they come back as a `QueryFailure` with the condition
reason the loop reports (TuningDegraded) while it holds the current config.
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from specinfer.operator.pure.access import without_userinfo
from specinfer.operator.tuner.bounded_http import BoundedSession, ResponseTooLarge
from specinfer.operator.tuner.pure.queries import Query

UNREACHABLE = "PrometheusUnreachable"
QUERY_FAILED = "PrometheusQueryFailed"
AUTH_FAILED = "PrometheusAuthFailed"
NOT_CONFIGURED = "PrometheusNotConfigured"

_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")          # RFC 6750 b64token
_HEADER_SAFE = re.compile(r"[\x20-\x7e\xa0-\xff]+")  # what requests can put into a Basic header (Latin-1)
# Prometheus' own errorType values (its HTTP API docs): the only words of a response body that reach status.
PROMETHEUS_ERROR_TYPES = frozenset({"bad_data", "timeout", "canceled", "execution", "internal", "unavailable",
                                    "not_found"})


@dataclass(frozen=True)
class Source:
    """Where and how to query; resources sharing a Source share one query set per tick."""

    url: str
    bearer_token: str | None = field(default=None, repr=False)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)
    timeout_seconds: float = 10.0
    max_response_bytes: int = 32 * 1024 * 1024  # a tenant may name its own Prometheus: bound its answers


@dataclass(frozen=True)
class QueryFailure:
    reason: str  # condition reason: PrometheusUnreachable, PrometheusQueryFailed, PrometheusAuthFailed
    message: str


@dataclass
class QueryRun:
    results: dict[str, list[dict[str, Any]]]
    failure: QueryFailure | None
    queries: int  # round trips made (for the constant-queries-per-tick measurement)
    seconds: float


class SecretError(ValueError):
    """The auth Secret lacks the keys the tuning spec points at, or holds something no header can carry."""


def _decoded(key: str, value: str) -> str:
    try:
        return base64.b64decode(value, validate=True).decode("utf-8").strip()
    except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
        raise SecretError(f"key {key!r} is not base64-encoded UTF-8 text") from None


def credentials_from_secret(data: Mapping[str, str] | None, key: str) -> dict[str, Any]:
    """Source keyword arguments from a Secret's base64 `data`: basic auth when it holds
    `username` and `password` and `key` names one of them, else a bearer token under `key`.

    A tenant writes the Secret, so its bytes are hostile: undecodable values and characters no
    HTTP header may carry are refused here with a SecretError, never raised into the tick."""
    wanted = {"username", "password", key}
    values = {k: _decoded(k, v) for k, v in (data or {}).items() if k in wanted}
    names = sorted(data or {})
    if key in ("username", "password") and values.get("username") and values.get("password"):
        user, password = values["username"], values["password"]
        if not all(_HEADER_SAFE.fullmatch(part) for part in (user, password)) or ":" in user:
            raise SecretError("keys 'username' and 'password' must be printable Latin-1 text without control "
                              "characters (and no ':' in the username)")
        return {"basic_auth": (user, password)}
    token = values.get(key)
    if not token:
        raise SecretError(f"the Secret has no non-empty key {key!r} (expected a bearer token there, or keys "
                          f"'username' and 'password' for basic auth); it has {names}")
    if not _TOKEN.fullmatch(token):
        raise SecretError(f"key {key!r} is not a bearer token (RFC 6750: letters, digits and -._~+/ then '=')")
    return {"bearer_token": token}


def _client(source: Source) -> PrometheusConnect:
    headers = {"Authorization": f"Bearer {source.bearer_token}"} if source.bearer_token else None
    # one quick retry only: the loop runs again next tick, and a stuck tick delays every resource
    retry = Retry(total=1, connect=0, backoff_factor=0.2, status_forcelist=[502, 503, 504], allowed_methods=["GET"])
    return PrometheusConnect(url=source.url, headers=headers, disable_ssl=False, retry=retry,
                             auth=source.basic_auth, timeout=source.timeout_seconds,
                             session=BoundedSession(source.max_response_bytes))


def _network_problem(error: Exception) -> str:
    """A short, stable description (requests' messages embed the query URL, which changes every tick)."""
    text = str(error)
    for marker, words in (("refused", "connection refused"), ("timed out", "timed out"),
                          ("Timeout", "timed out"), ("NameResolution", "host name not resolved"),
                          ("Name or service not known", "host name not resolved"), ("SSL", "TLS handshake failed")):
        if marker in text or marker in type(error).__name__:
            return words
    return type(error).__name__


def _spellings(secret: str) -> set[str]:
    """The forms a credential takes in error texts: as is, in a str or bytes repr (escaped), URL-quoted."""
    return {secret, repr(secret)[1:-1], repr(secret.encode())[2:-1], quote(secret, safe=""),
            secret.encode("unicode_escape").decode()}


def redact(text: str, source: Source) -> str:
    """Remove the credentials from an error text: these texts go into status, Events and logs (issue 9).

    Every length is redacted (a 3-character password too, at the price of a mangled message), in every
    spelling an exception's repr may give it; `user:password@` in a URL is removed as well (issue 15)."""
    secrets = [source.bearer_token, *(source.basic_auth or ())]
    if source.basic_auth:  # the Basic header carries base64("user:password")
        secrets.append(base64.b64encode(":".join(source.basic_auth).encode()).decode())
    spellings = {form for secret in secrets if secret for form in _spellings(secret)}
    for secret in sorted(spellings, key=len, reverse=True):
        text = text.replace(secret, "<redacted>")
    return without_userinfo(text)


def _failure(error: Exception, source: Source, query: Query) -> QueryFailure:
    failure = _describe_failure(error, source, query)
    return QueryFailure(failure.reason, redact(failure.message, source))


def _http_status(error: PrometheusApiClientException) -> tuple[str, str]:
    """("401", "bad_data") from prometheus-api-client's "HTTP Status Code 401 (b'...')": the code and
    Prometheus' errorType when it is one of its own; the body itself is the answerer's text and never
    copied (a tenant-chosen URL would otherwise read back ~300 characters of any page: issue 15)."""
    text = str(error)
    code = re.match(r"HTTP Status Code (\d{3})", text)
    kind = re.search(r'"errorType"\s*:\s*"([a-z_]{1,20})"', text)
    error_type = kind.group(1) if kind and kind.group(1) in PROMETHEUS_ERROR_TYPES else ""
    return (code.group(1) if code else "?"), error_type


def _describe_failure(error: Exception, source: Source, query: Query) -> QueryFailure:
    url = without_userinfo(source.url)
    if isinstance(error, ResponseTooLarge):
        return QueryFailure(QUERY_FAILED, f"query {query.name} at {url}: {error}")
    if isinstance(error, (requests.exceptions.JSONDecodeError, KeyError, TypeError)):
        # prometheus-api-client reads response.json()["data"]["result"]: the body is not Prometheus' answer
        return QueryFailure(QUERY_FAILED, f"{url} answered query {query.name} with something that is not "
                                          "a Prometheus query response (is the URL a Prometheus API?)")
    if isinstance(error, PrometheusApiClientException):
        code, error_type = _http_status(error)
        if code in ("401", "403"):
            return QueryFailure(AUTH_FAILED, f"Prometheus at {url} refused the credentials (HTTP {code})")
        detail = f" ({error_type})" if error_type else ""
        return QueryFailure(QUERY_FAILED, f"query {query.name} failed at {url}: HTTP {code}{detail}")
    if isinstance(error, requests.exceptions.RetryError):  # it answered, with 5xx on every try
        status = re.search(r"too many (\d{3}) error responses", str(error))
        code = f"HTTP {status.group(1)}" if status else "server errors"
        return QueryFailure(QUERY_FAILED, f"Prometheus at {url} answered {code} to query {query.name} "
                                          "on every try (overloaded, restarting, or a proxy in front of it)")
    if isinstance(error, (requests.RequestException, OSError)):
        return QueryFailure(UNREACHABLE, f"cannot reach Prometheus at {url}: {_network_problem(error)}")
    # anything else (a body that is not Prometheus JSON, ...): the type only, never the text it carries
    return QueryFailure(QUERY_FAILED, f"query {query.name} at {url} failed: {type(error).__name__}")


def run_queries(source: Source, queries: Sequence[Query], *, at: float,
                on_latency: Callable[[str, float, bool], None] | None = None,
                client: Any = None) -> QueryRun:
    """Evaluate every query at instant `at`; stop at the first failure (the tick is then void)."""
    connection = client or _client(source)
    results: dict[str, list[dict[str, Any]]] = {}
    started = time.monotonic()
    made = 0
    for query in queries:
        began = time.monotonic()
        made += 1
        try:
            results[query.name] = connection.custom_query(query=query.promql, params={"time": f"{at:.3f}"})
        except Exception as error:  # noqa: BLE001 -- every failure becomes a condition, never a crashed loop
            if on_latency:
                on_latency(query.name, time.monotonic() - began, False)
            return QueryRun(results, _failure(error, source, query), made, time.monotonic() - started)
        if on_latency:
            on_latency(query.name, time.monotonic() - began, True)
    return QueryRun(results, None, made, time.monotonic() - started)
