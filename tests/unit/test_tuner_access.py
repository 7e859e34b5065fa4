"""Where the tuner may send queries and credentials (operator/pure/access.py, operator/plumbing/secrets.py and the
tuning loop's `_source`, issue 15): a resource's spec never lends it the operator's rights."""

from __future__ import annotations

import asyncio
import base64
import copy

import pytest

from specinfer.operator.plumbing.kube import METADATA_ONLY
from specinfer.operator.pure.access import (
    AUTH_NOT_ALLOWED,
    URL_NOT_ALLOWED,
    PrometheusAccess,
    url_allowed,
)
from specinfer.operator.pure.config import parse_config
from specinfer.operator.pure.errors import ConfigError
from specinfer.operator.render.labels import PROMETHEUS_AUTH_LABEL
from specinfer.operator.tuner import prometheus as prom
from specinfer.operator.tuner.loop import TuningLoop
from tests.unit.test_tuner_loop import SETTINGS, FakeKube, FakePrometheus, resource
from tests.unit.test_tuner_observe import NOW

pytestmark = pytest.mark.unit

DEFAULT = "http://prometheus.monitoring:9090"


class SecretsKube(FakeKube):
    """Records every GET of a Secret and how (metadata only or whole)."""

    def __init__(self, secrets: dict[str, dict]):
        super().__init__()
        self.secrets = secrets
        self.gets: list[tuple[str, bool]] = []

    async def get(self, path, *, accept=None, **query):
        name = path.rsplit("/", 1)[1]
        self.gets.append((name, accept == METADATA_ONLY))
        secret = self.secrets.get(name)
        if secret is None:
            return None
        return {"metadata": copy.deepcopy(secret["metadata"])} if accept == METADATA_ONLY else copy.deepcopy(secret)


def secret(name: str, token: bytes, *, labelled: bool) -> dict:
    labels = {PROMETHEUS_AUTH_LABEL: "true"} if labelled else {}
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels},
            "data": {"token": base64.b64encode(token).decode()}}


def tick(prometheus_spec: dict, kube: SecretsKube, access: PrometheusAccess, monkeypatch) -> tuple[dict, list]:
    body = resource("r", mode="observe")
    body["spec"]["tuning"]["prometheus"] = prometheus_spec
    sources: list[prom.Source] = []
    server = FakePrometheus({})

    def client(source):
        sources.append(source)
        return server

    monkeypatch.setattr(prom, "_client", client)
    loop = TuningLoop(kube=kube, resources=lambda: [body], settings=SETTINGS, default_url=DEFAULT, events=kube,
                      clock=lambda: NOW, access=access)
    asyncio.run(loop.tick())
    (_, patch, _), = kube.patches
    degraded = next(c for c in patch["status"]["conditions"] if c["type"] == "TuningDegraded")
    return degraded, sources


def test_a_url_outside_the_allowlist_is_never_queried(monkeypatch):
    kube = SecretsKube({})
    degraded, sources = tick({"url": "http://169.254.169.254/latest/meta-data"}, kube,
                             PrometheusAccess(default_url=DEFAULT), monkeypatch)
    assert sources == []
    assert degraded["reason"] == URL_NOT_ALLOWED
    assert "prometheus.allowedUrls" in degraded["message"] and DEFAULT in degraded["message"]


def test_no_secret_is_read_unless_the_configuration_allows_it(monkeypatch):
    kube = SecretsKube({"auth": secret("auth", b"tok", labelled=True)})
    degraded, sources = tick({"authSecretRef": {"name": "auth"}}, kube, PrometheusAccess(default_url=DEFAULT),
                             monkeypatch)
    assert kube.gets == [] and sources == []
    assert degraded["reason"] == AUTH_NOT_ALLOWED and "prometheus.authSecrets is false" in degraded["message"]


def test_an_unlabelled_secret_is_never_read_nor_sent(monkeypatch):
    kube = SecretsKube({"db-password": secret("db-password", b"hunter2", labelled=False)})
    access = PrometheusAccess(default_url=DEFAULT, auth_secrets=True)
    degraded, sources = tick({"authSecretRef": {"name": "db-password"}}, kube, access, monkeypatch)
    assert kube.gets == [("db-password", True)], "only its metadata may be read"
    assert sources == []
    assert degraded["reason"] == AUTH_NOT_ALLOWED
    assert f"kubectl label secret -n ns db-password {PROMETHEUS_AUTH_LABEL}=true" in degraded["message"]


def test_a_labelled_secret_goes_to_an_allowed_url_only(monkeypatch):
    kube = SecretsKube({"auth": secret("auth", b"good-token", labelled=True)})
    access = PrometheusAccess(default_url=DEFAULT, allowed_urls=("https://thanos.example/team-a",), auth_secrets=True)
    _, sources = tick({"url": "https://thanos.example/team-a/", "authSecretRef": {"name": "auth"}}, kube, access,
                      monkeypatch)
    assert [(s.url, s.bearer_token) for s in sources] == [("https://thanos.example/team-a/", "good-token")]
    assert kube.gets == [("auth", True), ("auth", False)]
    kube = SecretsKube({"auth": secret("auth", b"good-token", labelled=True)})
    degraded, sources = tick({"url": "https://evil.example/", "authSecretRef": {"name": "auth"}}, kube, access,
                             monkeypatch)
    assert sources == [] and kube.gets == [] and degraded["reason"] == URL_NOT_ALLOWED


def test_a_non_utf8_secret_costs_its_resource_a_condition_not_the_tick(monkeypatch):
    kube = SecretsKube({"auth": secret("auth", b"\xff\xfe\xfd", labelled=True)})
    degraded, sources = tick({"authSecretRef": {"name": "auth"}}, kube,
                             PrometheusAccess(default_url=DEFAULT, auth_secrets=True), monkeypatch)
    assert sources == []
    assert degraded["reason"] == prom.AUTH_FAILED and "not base64-encoded UTF-8" in degraded["message"]


@pytest.mark.parametrize("url, allowed", [
    ("http://prometheus.monitoring:9090", True),
    ("http://PROMETHEUS.monitoring:9090/", True),
    ("http://prometheus.monitoring:9090/sub/path", True),
    ("https://prometheus.monitoring:9090", False),                 # another scheme
    ("http://prometheus.monitoring:9091", False),                  # another port
    ("http://prometheus.monitoring:9090.evil.example", False),     # a prefix of the host is not the host
    ("http://prometheus.monitoring:9090@evil.example", False),     # userinfo
    ("http://prometheus.monitoring:9090/../admin", False),
    ("http://prometheus.monitoring:9090/%2e%2e/admin", False),
    ("http://prometheus.monitoring:9090/?x=1", False),
])
def test_url_matching_is_by_scheme_host_port_and_path(url, allowed):
    assert url_allowed(url, [DEFAULT]) is allowed


def test_allowed_paths_match_whole_segments():
    assert url_allowed("https://thanos.example/api/team-a/x", ["https://thanos.example/api/team-a"])
    assert not url_allowed("https://thanos.example/api/team-ab", ["https://thanos.example/api/team-a"])


def test_the_configuration_refuses_urls_with_credentials():
    for bad in ({"url": "http://user:pw@prometheus:9090"}, {"allowedUrls": ["ftp://x"]}):
        with pytest.raises(ConfigError, match="base URL without credentials"):
            parse_config({"prometheus": bad})
    access = parse_config({"prometheus": {"url": DEFAULT, "allowedUrls": ["http://b:1"], "authSecrets": True}})
    assert access.prometheus.access() == PrometheusAccess(DEFAULT, ("http://b:1",), True)


def test_an_api_server_away_while_reading_the_secret_holds_that_source_only(monkeypatch):
    class Away(SecretsKube):
        async def get(self, path, *, accept=None, **query):
            raise ConnectionRefusedError(111, "Connection refused")

    degraded, sources = tick({"authSecretRef": {"name": "auth"}}, Away({}),
                             PrometheusAccess(default_url=DEFAULT, auth_secrets=True), monkeypatch)
    assert sources == [] and degraded["reason"] == prom.AUTH_FAILED
    assert "ConnectionRefusedError" in degraded["message"]
