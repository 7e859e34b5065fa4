"""Prometheus answers and credentials never reach status, Events or logs through an error text.

Issue 9: a Prometheus or an auth proxy may echo the Authorization header in its error body.
Issue 15: the URL is tenant-chosen, so the body itself is hostile (a tenant could read back
~300 characters of any page the operator can reach): no body text is copied at all, only the
HTTP status and Prometheus' own errorType. Redaction stays as a second line of defence and
now covers every length, repr spellings and `user:password@` in URLs.
"""

from __future__ import annotations

import base64

import pytest
from prometheus_api_client.exceptions import PrometheusApiClientException

from specinfer.operator.tuner.prometheus import (
    AUTH_FAILED,
    QUERY_FAILED,
    SecretError,
    Source,
    _failure,
    credentials_from_secret,
    redact,
)
from specinfer.operator.tuner.pure.queries import Query

pytestmark = pytest.mark.unit

QUERY = Query("scrapeTime", "up")


def client_error(status: int, body: str) -> PrometheusApiClientException:
    """What prometheus-api-client raises for a non-200 answer (its message embeds the raw body)."""
    return PrometheusApiClientException(f"HTTP Status Code {status} ({body.encode()!r})")


@pytest.mark.parametrize("status", [400, 401, 403, 404, 500])
def test_no_response_body_reaches_the_message(status):
    token = "PLANTED" + "x" * 400
    source = Source("http://prometheus:9090", bearer_token=token)
    body = f"<html>internal admin page SECRET-CONTENT; got Authorization: Bearer {token}</html>"
    failure = _failure(client_error(status, body), source, QUERY)
    assert failure.reason == (AUTH_FAILED if status in (401, 403) else QUERY_FAILED)
    assert f"HTTP {status}" in failure.message
    for leaked in ("SECRET-CONTENT", "PLANTED", "html", "Authorization"):
        assert leaked not in failure.message


def test_prometheus_error_type_is_kept_but_not_free_text():
    source = Source("http://prometheus:9090")
    real = client_error(422, '{"status":"error","errorType":"execution","error":"query timed out at SECRET"}')
    assert _failure(real, source, QUERY).message.endswith("HTTP 422 (execution)")
    forged = client_error(422, '{"status":"error","errorType":"pwned_by_tenant","error":"x"}')
    assert "pwned" not in _failure(forged, source, QUERY).message


def test_an_unexpected_error_contributes_its_type_only():
    source = Source("http://prometheus:9090", basic_auth=("reader", "s3cret-pw"))
    header = base64.b64encode(b"reader:s3cret-pw").decode()
    failure = _failure(RuntimeError(f"proxy said: Basic {header} (password s3cret-pw) BODY"), source, QUERY)
    assert failure.message == "query scrapeTime at http://prometheus:9090 failed: RuntimeError"


def test_url_credentials_never_reach_the_message():
    source = Source("http://reader:hunter2@prometheus:9090")
    failure = _failure(client_error(500, "x"), source, QUERY)
    assert "hunter2" not in failure.message and "reader" not in failure.message
    assert "http://<redacted>@prometheus:9090" in failure.message


@pytest.mark.parametrize("secret", ["abc", "x", "pä'ss\\w\"ord", "tok\u2603en"])
def test_redaction_covers_short_secrets_and_repr_spellings(secret):
    source = Source("http://prometheus:9090", basic_auth=("user", secret))
    texts = [f"plain {secret}", f"bytes {secret.encode()!r}", f"str {secret!r}",
             f"quoted {__import__('urllib.parse').parse.quote(secret, safe='')}"]
    for text in texts:
        assert secret not in redact(text, source).replace("<redacted>", "")
        assert repr(secret.encode())[2:-1] not in redact(text, source).replace("<redacted>", ""), text


def encode(**values: bytes | str) -> dict[str, str]:
    return {k: base64.b64encode(v if isinstance(v, bytes) else v.encode()).decode() for k, v in values.items()}


@pytest.mark.parametrize("data, key, complaint", [
    (encode(token=b"\xff\xfe-not-utf8"), "token", "not base64-encoded UTF-8"),
    ({"token": "%%%not-base64%%%"}, "token", "not base64-encoded UTF-8"),
    (encode(token="abc\r\nX-Injected: 1"), "token", "not a bearer token"),
    (encode(token="two words"), "token", "not a bearer token"),
    (encode(username="u", password="p\x00w"), "password", "printable Latin-1"),
    (encode(username="a:b", password="pw"), "password", "no ':' in the username"),
])
def test_hostile_secret_bytes_are_a_secret_error_never_a_crash(data, key, complaint):
    with pytest.raises(SecretError, match=complaint):
        credentials_from_secret(data, key)


def test_unrelated_undecodable_keys_do_not_matter():
    data = {**encode(token="good.token-123="), "other": "%%%"}
    assert credentials_from_secret(data, "token") == {"bearer_token": "good.token-123="}
