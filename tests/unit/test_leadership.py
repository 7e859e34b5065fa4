"""kopf's peering rule re-derived (operator/plumbing/leadership.py): who is active, from the peering object's status."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from specinfer.operator.plumbing.leadership import Leadership, peering_decision, peering_paths

pytestmark = pytest.mark.unit

NOW = datetime.datetime(2026, 11, 29, 13, 0, 0, tzinfo=datetime.UTC)
ME, PRIORITY = "me@host/20261129130000/abc", -1000


def seen(seconds_ago: float) -> str:
    """A lastseen exactly as kopf writes it: Peer.as_dict() -> str(datetime.isoformat()) of an aware UTC time."""
    return (NOW - datetime.timedelta(seconds=seconds_ago)).isoformat()


def peer(priority: int, seconds_ago: float = 1, lifetime: int = 30) -> dict:
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen(seconds_ago)}


def active(status) -> bool:
    return peering_decision(status, identity=ME, priority=PRIORITY, now=NOW).active


def test_kopf_timestamp_format_is_what_we_parse():
    assert seen(1) == "2026-11-29T12:59:59+00:00"
    assert datetime.datetime(2026, 11, 29, 12, 59, 59, 123456, tzinfo=datetime.UTC).isoformat() == \
        "2026-11-29T12:59:59.123456+00:00"


def test_alone_is_active():
    assert active(None) and active({})
    assert active({ME: peer(PRIORITY)})


def test_our_own_entry_is_ignored_even_if_it_looks_higher():
    assert active({ME: peer(PRIORITY + 5)})


def test_an_alive_higher_priority_peer_pauses_us():
    decision = peering_decision({ME: peer(PRIORITY), "new": peer(2**62)}, identity=ME, priority=PRIORITY, now=NOW)
    assert not decision.active and "new" in decision.reason


def test_a_lower_priority_peer_does_not():
    assert active({"later": peer(PRIORITY - 1)})


def test_an_expired_higher_priority_peer_does_not():
    assert active({"dead": peer(2**62, seconds_ago=31, lifetime=30)})
    assert active({"dead": peer(2**62, seconds_ago=30, lifetime=30)})  # kopf: dead when deadline <= now
    assert not active({"alive": peer(2**62, seconds_ago=29.5, lifetime=30)})


def test_the_same_priority_pauses_every_replica_like_kopf():
    assert not active({"twin": peer(PRIORITY)})


def test_kopf_defaults_and_other_timestamp_spellings():
    assert not active({"bare": {}})  # priority 0 > ours, lastseen missing = now, lifetime 60
    assert not active({"z": {"priority": 1, "lifetime": 30, "lastseen": "2026-11-29T12:59:50Z"}})
    assert not active({"naive": {"priority": 1, "lifetime": 30, "lastseen": "2026-11-29T12:59:50"}})  # UTC
    assert active({"naive": {"priority": 1, "lifetime": 30, "lastseen": "2026-11-29T12:59:20"}})
    assert not active({"offset": {"priority": 1, "lifetime": 30, "lastseen": "2026-11-29T14:59:50+02:00"}})


def test_peering_paths_namespaced_and_cluster():
    assert peering_paths("p", ("a", "b")) == ["/apis/kopf.dev/v1/namespaces/a/kopfpeerings/p",
                                             "/apis/kopf.dev/v1/namespaces/b/kopfpeerings/p"]
    assert peering_paths("p", ()) == ["/apis/kopf.dev/v1/clusterkopfpeerings/p"]


class FakeKube:
    def __init__(self, objects: dict):
        self.objects, self.gets, self.fail = objects, [], False

    async def get(self, path, **query):
        self.gets.append(path)
        if self.fail:
            raise ConnectionError("API down")
        status = self.objects.get(path)
        return None if status is None else {"status": status}


def leadership(kube, namespaces=("a", "b")) -> Leadership:
    return Leadership(kube, peering="p", namespaces=namespaces, identity=ME, priority=PRIORITY, clock=lambda: NOW)


def test_standalone_is_always_active_and_reads_nothing():
    kube = FakeKube({})
    lead = Leadership(kube, peering=None, identity=ME, priority=PRIORITY)
    asyncio.run(lead.refresh())
    assert lead.active() and kube.gets == []


def test_namespaced_peering_is_paused_when_any_namespace_says_so():
    a, b = peering_paths("p", ("a", "b"))
    kube = FakeKube({a: {}, b: {"new": peer(2**62)}})
    lead = leadership(kube)
    assert not lead.active()  # like kopf with a mandatory peering: standby until read
    asyncio.run(lead.refresh())
    assert not lead.active() and set(kube.gets) == {a, b}
    kube.objects[b] = {}
    asyncio.run(lead.refresh())
    assert not lead.active(), "resuming waits one refresh for kopf's re-list"
    asyncio.run(lead.refresh())
    assert lead.active()


def test_cluster_peering_reads_the_cluster_object():
    (path,) = peering_paths("p", ())
    lead = leadership(FakeKube({path: {}}), namespaces=())
    asyncio.run(lead.refresh())
    assert lead.active()


def test_a_failed_read_keeps_the_last_decision(caplog):
    a, b = peering_paths("p", ("a", "b"))
    kube = FakeKube({a: {}, b: {}})
    lead = leadership(kube)
    asyncio.run(lead.refresh())
    assert lead.active()
    kube.fail = True
    for _ in range(3):
        asyncio.run(lead.refresh())
    assert lead.active()
    assert sum("cannot read peering object" in r.message for r in caplog.records) == 2  # once per object
    kube.fail, kube.objects[a] = False, {"new": peer(2**62)}
    asyncio.run(lead.refresh())
    assert not lead.active()
    kube.fail = True
    asyncio.run(lead.refresh())
    assert not lead.active()


def test_a_missing_peering_object_keeps_standby():
    lead = leadership(FakeKube({}))
    asyncio.run(lead.refresh())
    assert not lead.active()


def test_identity_is_the_pod_name_in_a_cluster(monkeypatch):
    from specinfer.operator.operator_cli import own_identity

    monkeypatch.delenv("POD_ID", raising=False)
    monkeypatch.setenv("POD_NAME", "specinfer-operator-7d9f-abcde")  # the chart's downward-API variable
    assert own_identity() == "specinfer-operator-7d9f-abcde"
    monkeypatch.setenv("POD_ID", "kopf-style")  # kopf's own variable wins, as in kopf
    assert own_identity() == "kopf-style"
    monkeypatch.delenv("POD_ID")
    monkeypatch.delenv("POD_NAME")
    user_host, started, suffix = own_identity().split("/")  # outside a pod: user@host/start/random
    assert "@" in user_host and len(started) == 14 and len(suffix) == 3



def test_the_peering_objects_are_created_under_the_operators_field_manager_and_an_existing_one_is_kept():
    import asyncio
    from types import SimpleNamespace

    from specinfer.operator.handlers.lifecycle import ensure_peering_object
    from specinfer.operator.plumbing.kube import Kube
    from specinfer.operator.pure.config import OperatorConfig
    from specinfer.operator.pure.errors import ApiError

    created: list[tuple[str, str, str]] = []

    class Recording(Kube):
        def __init__(self) -> None:  # no client: request() answers
            pass

        async def request(self, method, path, *, query=None, body=None, **_):
            created.append((f"{method} {path}", body["kind"], dict(query or [])["fieldManager"]))
            if body["metadata"].get("namespace") == "b":
                raise ApiError(409, method, path, "exists")  # another replica made it: fine
            return body

    def ensure(namespaces: tuple[str, ...]) -> None:
        controller = SimpleNamespace(kube=Recording(), options=SimpleNamespace(config=OperatorConfig()))
        asyncio.run(ensure_peering_object(controller, "p", namespaces))  # type: ignore[arg-type]

    ensure(("a", "b"))
    ensure(())
    assert created == [
        ("POST /apis/kopf.dev/v1/namespaces/a/kopfpeerings", "KopfPeering", "specinfer-operator"),
        ("POST /apis/kopf.dev/v1/namespaces/b/kopfpeerings", "KopfPeering", "specinfer-operator"),
        ("POST /apis/kopf.dev/v1/clusterkopfpeerings", "ClusterKopfPeering", "specinfer-operator")]
