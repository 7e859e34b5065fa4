"""Prometheus I/O for the tuning loop: one query set, one instant, through prometheus-api-client.

Failures never raise into the loop: they come back as a `QueryFailure` with the condition
reason the loop reports (TuningDegraded) while it holds the current config.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from specinfer.operator.tuner.bounded_http import BoundedSession, ResponseTooLarge
from specinfer.operator.tuner.queries import Query

UNREACHABLE = "PrometheusUnreachable"
QUERY_FAILED = "PrometheusQueryFailed"
AUTH_FAILED = "PrometheusAuthFailed"
NOT_CONFIGURED = "PrometheusNotConfigured"


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
    """The auth Secret lacks the keys the tuning spec points at."""


def credentials_from_secret(data: Mapping[str, str] | None, key: str) -> dict[str, Any]:
    """Source keyword arguments from a Secret's base64 `data`: basic auth when it holds
    `username` and `password` and `key` names one of them, else a bearer token under `key`."""
    values = {k: base64.b64decode(v).decode().strip() for k, v in (data or {}).items()}
    if key in ("username", "password") and values.get("username") and values.get("password"):
        return {"basic_auth": (values["username"], values["password"])}
    token = values.get(key)
    if not token:
        raise SecretError(f"the Secret has no non-empty key {key!r} (expected a bearer token there, or keys "
                          f"'username' and 'password' for basic auth); it has {sorted(values)}")
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


def redact(text: str, source: Source) -> str:
    """Remove the credentials from an error text: a Prometheus or proxy may echo the Authorization
    header in its error body, and these texts go into status, Events and logs (issue 9)."""
    secrets = [source.bearer_token, *(source.basic_auth or ())]
    if source.basic_auth:  # the Basic header carries base64("user:password")
        secrets.append(base64.b64encode(":".join(source.basic_auth).encode()).decode())
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, "<redacted>")
    return text


def _failure(error: Exception, source: Source, query: Query) -> QueryFailure:
    failure = _describe_failure(error, source, query)
    return QueryFailure(failure.reason, redact(failure.message, source))


def _describe_failure(error: Exception, source: Source, query: Query) -> QueryFailure:
    if isinstance(error, ResponseTooLarge):
        return QueryFailure(QUERY_FAILED, f"query {query.name} at {source.url}: {error}")
    if isinstance(error, (requests.exceptions.JSONDecodeError, KeyError, TypeError)):
        # prometheus-api-client reads response.json()["data"]["result"]: the body is not Prometheus' answer
        return QueryFailure(QUERY_FAILED, f"{source.url} answered query {query.name} with something that is not "
                                          "a Prometheus query response (is the URL a Prometheus API?)")
    if isinstance(error, PrometheusApiClientException):
        text = redact(str(error), source)  # before cutting: a cut token would escape redaction
        if "401" in text[:40] or "403" in text[:40]:
            return QueryFailure(AUTH_FAILED, f"Prometheus at {source.url} refused the credentials: {text[:300]}")
        return QueryFailure(QUERY_FAILED, f"query {query.name} failed at {source.url}: {text[:300]}")
    if isinstance(error, requests.exceptions.RetryError):  # it answered, with 5xx on every try
        status = re.search(r"too many (\d{3}) error responses", str(error))
        code = f"HTTP {status.group(1)}" if status else "server errors"
        return QueryFailure(QUERY_FAILED, f"Prometheus at {source.url} answered {code} to query {query.name} "
                                          "on every try (overloaded, restarting, or a proxy in front of it)")
    if isinstance(error, (requests.RequestException, OSError)):
        return QueryFailure(UNREACHABLE, f"cannot reach Prometheus at {source.url}: {_network_problem(error)}")
    return QueryFailure(QUERY_FAILED, f"query {query.name} at {source.url}: {type(error).__name__}: {error}")


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
        except Exception as error:  # every failure becomes a condition, never a crashed loop
            if on_latency:
                on_latency(query.name, time.monotonic() - began, False)
            return QueryRun(results, _failure(error, source, query), made, time.monotonic() - started)
        if on_latency:
            on_latency(query.name, time.monotonic() - began, True)
    return QueryRun(results, None, made, time.monotonic() - started)
