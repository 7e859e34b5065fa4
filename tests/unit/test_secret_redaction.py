"""Prometheus credentials never reach status, Events or logs through an error text (issue 9).

A Prometheus or an auth proxy in front of it may echo the Authorization header in its error
body; the tuning loop copies failure messages into TuningDegraded. Found by the planted-secret
test (tests/e2e/faults/test_security_defaults.py).
"""

from __future__ import annotations

import base64

import pytest
from prometheus_api_client.exceptions import PrometheusApiClientException

from specinfer.operator.tuner.prometheus import AUTH_FAILED, QUERY_FAILED, Source, _failure
from specinfer.operator.tuner.queries import Query

pytestmark = pytest.mark.unit

QUERY = Query("scrapeTime", "up")


@pytest.mark.parametrize("status", [401, 403, 500])
def test_echoed_bearer_token_is_redacted_even_past_the_cut(status):
    token = "PLANTED" + "x" * 400  # longer than the 300 characters kept: a cut must not leave a prefix
    source = Source("http://prometheus:9090", bearer_token=token)
    error = PrometheusApiClientException(f"HTTP Status Code {status} (b'got Authorization: Bearer {token}')")
    failure = _failure(error, source, QUERY)
    assert failure.reason == (AUTH_FAILED if status in (401, 403) else QUERY_FAILED)
    assert "PLANTED" not in failure.message and "<redacted>" in failure.message


def test_echoed_basic_auth_is_redacted_in_plain_and_base64():
    source = Source("http://prometheus:9090", basic_auth=("reader", "s3cret-pw"))
    header = base64.b64encode(b"reader:s3cret-pw").decode()
    failure = _failure(RuntimeError(f"proxy said: Basic {header} (password s3cret-pw)"), source, QUERY)
    assert "s3cret-pw" not in failure.message and header not in failure.message
