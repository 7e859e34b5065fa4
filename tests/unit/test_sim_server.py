"""The simulator's HTTP surface in-process (aiohttp test client, scaled time)."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp.test_utils import TestClient, TestServer

from specinfer.runtime.sim.server import SIM_KEY, build_app
from specinfer.runtime.sim.settings import Phase, SimulatorSettings
from specinfer.runtime.sim.simulator import Simulator

pytestmark = pytest.mark.unit


async def client_for(**overrides) -> TestClient:
    base = {"model_name": "sim", "method": "eagle3", "num_speculative_tokens": 3,
            "time_scale": 50.0}
    base.update(overrides)
    client = TestClient(TestServer(build_app(Simulator(SimulatorSettings(**base)))))
    await client.start_server()
    return client


async def test_completion_returns_exactly_max_tokens_with_usage():
    client = await client_for()
    try:
        response = await client.post("/v1/completions",
                                     json={"model": "sim", "prompt": "one two three", "max_tokens": 40})
        body = await response.json()
        assert response.status == 200
        assert body["object"] == "text_completion"
        assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 40, "total_tokens": 43}
        assert len(body["choices"][0]["text"].split()) == 40
        assert body["choices"][0]["finish_reason"] == "length"
    finally:
        await client.close()


async def test_streaming_chat_sends_one_chunk_per_step_and_done():
    client = await client_for()
    try:
        response = await client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 60, "stream": True,
            "stream_options": {"include_usage": True}})
        events = [line[6:] for line in (await response.text()).splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        texts = [c["choices"][0]["delta"]["content"] for c in chunks[1:] if c["choices"]]
        assert sum(len(t.split()) for t in texts) == 60
        # speculation: several tokens per step, so fewer chunks than tokens
        assert len(texts) < 60
        assert chunks[-1]["usage"]["completion_tokens"] == 60
        assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    finally:
        await client.close()


async def test_metrics_count_what_was_served():
    client = await client_for()
    try:
        for _ in range(3):
            await client.post("/v1/completions", json={"prompt": "a b", "max_tokens": 30})
        text = await (await client.get("/metrics")).text()
        samples = {line.split(" ")[0]: float(line.split(" ")[1])
                   for line in text.splitlines() if line and not line.startswith("#")}
        labels = '{engine="0",model_name="sim"}'
        assert samples[f"vllm:generation_tokens_total{labels}"] == 90
        assert samples[f"vllm:prompt_tokens_total{labels}"] == 6
        assert samples[f"vllm:e2e_request_latency_seconds_count{labels}"] == 3
        drafts = samples[f"vllm:spec_decode_num_drafts_total{labels}"]
        assert samples[f"vllm:spec_decode_num_draft_tokens_total{labels}"] == 3 * drafts
        pos0 = samples['vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="sim",position="0"}']
        assert 0 < pos0 <= drafts
    finally:
        await client.close()


async def test_admin_endpoints_are_off_unless_enabled():
    """Unauthenticated, and a workload switch steers what the tuner measures (issue 15): opt-in only."""
    client = await client_for()
    try:
        for method, path in (("GET", "/admin/workload"), ("POST", "/admin/workload"), ("GET", "/admin/state"),
                             ("POST", "/admin/acceptance")):
            response = await client.request(method, path, json={"workload": "code"})
            assert response.status == 404, (method, path)
        assert client.server.app[SIM_KEY].current_workload() == "chat"
    finally:
        await client.close()


async def test_admin_switches_workload_and_refuses_unknown_ones():
    client = await client_for(admin=True)
    try:
        assert (await (await client.get("/admin/workload")).json()) == {"workload": "chat"}
        response = await client.post("/admin/workload", json={"workload": "code"})
        assert (await response.json()) == {"workload": "code"}
        response = await client.post("/admin/workload", json={"workload": "poetry"})
        assert response.status == 400
        assert "known: chat" in (await response.json())["error"]["message"]
    finally:
        await client.close()


async def test_admin_collapses_acceptance_and_heals_it():
    """Fault injection for the alert tests: a broken drafter accepts almost no first draft token."""
    client = await client_for(num_speculative_tokens=2, admin=True)

    async def first_position_rate() -> tuple[float, float]:
        text = await (await client.get("/metrics")).text()
        samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line and not line.startswith("#")}
        return (samples['vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="sim",position="0"}'],
                samples['vllm:spec_decode_num_drafts_total{engine="0",model_name="sim"}'])

    async def serve(n: int) -> None:
        await asyncio.gather(*(client.post("/v1/completions", json={"prompt": "a", "max_tokens": 200})
                               for _ in range(n)))

    try:
        assert (await (await client.get("/admin/acceptance")).json()) == {"collapsed": False}
        await serve(4)
        healthy_accepted, healthy_drafts = await first_position_rate()
        assert healthy_accepted / healthy_drafts > 0.6  # eagle3 on chat: 0.80
        response = await client.post("/admin/acceptance", json={"collapsed": True})
        assert (await response.json()) == {"collapsed": True}
        await serve(4)
        accepted, drafts = await first_position_rate()
        assert drafts - healthy_drafts > 300
        assert (accepted - healthy_accepted) / (drafts - healthy_drafts) < 0.06  # the collapsed profile: 0.02
        for bad in ({"collapsed": "yes"}, {"collapse": True}):
            response = await client.post("/admin/acceptance", json=bad)
            assert response.status == 400 and "collapsed" in (await response.json())["error"]["message"]
        await client.post("/admin/acceptance", json={"collapsed": False})
        assert (await (await client.get("/admin/acceptance")).json()) == {"collapsed": False}
    finally:
        await client.close()


async def test_a_collapsed_phase_breaks_the_drafter_without_any_admin_endpoint():
    """spec.runtime.simulator.phases[].acceptanceCollapsed: the declarative fault pods run by the operator use."""
    client = await client_for(num_speculative_tokens=2, time_scale=50.0,
                              phases=(Phase("chat", 100.0), Phase("chat", 10000.0, collapsed=True)))

    async def counts() -> tuple[float, float]:
        text = await (await client.get("/metrics")).text()
        samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line and not line.startswith("#")}
        return (samples['vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="sim",position="0"}'],
                samples['vllm:spec_decode_num_drafts_total{engine="0",model_name="sim"}'])

    try:
        await client.post("/v1/completions", json={"prompt": "a", "max_tokens": 100})
        healthy_accepted, healthy_drafts = await counts()
        assert healthy_drafts > 20 and healthy_accepted / healthy_drafts > 0.6
        # The healthy phase lasts 2 s of wall time at 50x (0.2 s was too short on a busy machine: the first request
        # already ran in the collapsed phase); the simulated clock follows the wall clock, so 2.2 s reaches the next
        await asyncio.sleep(2.2)
        await asyncio.gather(*(client.post("/v1/completions", json={"prompt": "a", "max_tokens": 200})
                               for _ in range(4)))
        accepted, drafts = await counts()
        assert drafts - healthy_drafts > 300
        assert (accepted - healthy_accepted) / (drafts - healthy_drafts) < 0.06
        assert (await client.get("/admin/acceptance")).status == 404  # no admin endpoint was needed
    finally:
        await client.close()


async def test_openai_errors_look_like_vllms():
    client = await client_for()
    try:
        response = await client.post("/v1/completions", json={"model": "other", "prompt": "x"})
        assert response.status == 404
        assert (await response.json())["error"]["message"] == "The model `other` does not exist."
        response = await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 0})
        assert response.status == 400
        models = await (await client.get("/v1/models")).json()
        assert [m["id"] for m in models["data"]] == ["sim"]
    finally:
        await client.close()


async def test_health_is_503_while_the_model_loads():
    client = await client_for(startup_s=1000.0)
    try:
        assert (await client.get("/health")).status == 503
        assert (await client.post("/v1/completions", json={"prompt": "x"})).status == 503
    finally:
        await client.close()


async def test_a_dead_engine_loop_fails_health_instead_of_hanging():
    client = await client_for()
    try:
        sim = client.server.app[SIM_KEY]

        def broken(now):
            raise RuntimeError("boom")

        sim.engine.plan_step = broken
        request = asyncio.ensure_future(client.post("/v1/completions", json={"prompt": "x", "max_tokens": 5}))
        for _ in range(100):
            if sim.failure:
                break
            await asyncio.sleep(0.01)
        response = await client.get("/health")
        assert response.status == 500 and "boom" in await response.text()
        pending = await asyncio.wait_for(request, 5)  # answered, not left hanging
        assert pending.status == 500
    finally:
        await client.close()
