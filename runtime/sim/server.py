"""The simulator's HTTP server: vLLM's OpenAI-compatible API, /metrics and (when enabled) admin endpoints.

Handlers turn requests into engine requests and stream the tokens each step hands
them; the engine loop itself lives in runtime/sim/simulator.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from specinfer.api.workload import DRAIN_SECONDS
from specinfer.runtime.sim import openai
from specinfer.runtime.sim.engine import SimRequest
from specinfer.runtime.sim.model import WORKLOADS
from specinfer.runtime.sim.settings import SimulatorSettings
from specinfer.runtime.sim.simulator import Simulator

log = logging.getLogger("specinfer.sim")

VLLM_VERSION = "0.33.0"
WORKLOAD_HEADER = "X-Specinfer-Workload"  # optional per-request workload (ignored by a real vLLM)



SIM_KEY = web.AppKey("simulator", Simulator)


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type="application/json")


def _error(message: str, status: int, param: str | None = None) -> web.Response:
    return _json(openai.error_body(message, status, param), status)


async def health(request: web.Request) -> web.Response:
    sim = request.app[SIM_KEY]
    if sim.failure is not None:
        return web.Response(status=500, text=f"engine failed: {sim.failure}")
    return web.Response(status=200) if sim.ready else web.Response(status=503, text="loading model")


async def version(request: web.Request) -> web.Response:
    return _json({"version": VLLM_VERSION})


async def models(request: web.Request) -> web.Response:
    s = request.app[SIM_KEY].settings
    card = {"id": s.model_name, "object": "model", "created": int(time.time()), "owned_by": "vllm",
            "root": s.model_name, "parent": None, "max_model_len": s.max_model_len, "permission": []}
    return _json({"object": "list", "data": [card]})


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[SIM_KEY].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def admin_workload(request: web.Request) -> web.Response:
    sim = request.app[SIM_KEY]
    if request.method == "POST":
        try:
            body = await request.json()
            workload = body["workload"]
        except (ValueError, KeyError, TypeError):
            return _error('send {"workload": "<name>"}', 400, "workload")
        if workload not in WORKLOADS:
            return _error(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}", 400, "workload")
        sim.set_workload(workload)
        log.info("workload switched to %s", workload)
    return _json({"workload": sim.current_workload()})


async def admin_acceptance(request: web.Request) -> web.Response:
    """Fault injection: {"collapsed": true} makes every draft nearly worthless (a broken drafter), false heals it."""
    sim = request.app[SIM_KEY]
    if request.method == "POST":
        try:
            body = await request.json()
            collapsed = body["collapsed"]
        except (ValueError, KeyError, TypeError):
            return _error('send {"collapsed": true|false}', 400, "collapsed")
        if not isinstance(collapsed, bool):
            return _error(f"collapsed must be true or false, got {collapsed!r}", 400, "collapsed")
        sim.set_collapsed(collapsed)
        log.info("acceptance %s", "collapsed (fault injected)" if collapsed else "back to the workload's profile")
    return _json({"collapsed": sim.current_collapsed()})


async def admin_state(request: web.Request) -> web.Response:
    return _json(request.app[SIM_KEY].state())


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True)


async def _generate(request: web.Request, *, chat: bool) -> web.StreamResponse:
    sim = request.app[SIM_KEY]
    if sim.failure is not None:
        return _error(f"the engine failed: {sim.failure}", 500)
    if not sim.ready:
        return _error("the model is still loading", 503)
    try:
        body = await request.json()
    except ValueError:
        return _error("the request body must be JSON", 400)
    s = sim.settings
    try:
        parsed = openai.parse_request(body, chat=chat, served_model=s.model_name,
                                      default_max_tokens=s.default_max_tokens, max_model_len=s.max_model_len)
    except openai.RequestError as error:
        return _error(str(error), error.status, error.param)
    workload = request.headers.get(WORKLOAD_HEADER)
    if workload is not None and workload not in WORKLOADS:
        return _error(f"{WORKLOAD_HEADER}: unknown workload {workload!r}; known: {', '.join(WORKLOADS)}", 400)
    request_id = openai.new_request_id(chat)
    queue: asyncio.Queue[tuple[int, str | None]] = asyncio.Queue()
    sim_request = SimRequest(request_id=request_id, prompt_tokens=parsed.prompt_tokens, max_tokens=parsed.max_tokens,
                             arrival=sim.clock.now(), workload=workload,
                             sink=lambda tokens, finish: queue.put_nowait((tokens, finish)))
    sim.submit(sim_request)
    try:
        if parsed.stream:
            return await _stream(request, sim, parsed, request_id, queue)
        generated, finish = 0, None
        while finish is None:
            tokens, finish = await queue.get()
            generated += tokens
        if finish == "error":
            return _error(f"the engine failed: {sim.failure}", 500)
        return _json(openai.full_response(request_id, s.model_name, parsed, openai.filler_text(0, generated),
                                          generated, finish))
    finally:
        if sim_request.finish_reason is None:  # client went away (or error): stop generating for it
            sim_request.finish_reason = "abort"
            sim.engine.abort(sim_request)


async def _stream(request: web.Request, sim: Simulator, parsed: openai.ParsedRequest, request_id: str,
                  queue: asyncio.Queue) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    model, created = sim.settings.model_name, int(time.time())

    async def send(payload: dict[str, Any] | str) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
        await response.write(f"data: {data}\n\n".encode())

    if parsed.chat:
        await send(openai.stream_chunk(request_id, model, parsed, created, None, None, first=True))
    generated, finish = 0, None
    while finish is None:
        tokens, finish = await queue.get()
        text = openai.filler_text(generated, tokens)
        generated += tokens
        await send(openai.stream_chunk(request_id, model, parsed, created, text, finish))
    if parsed.include_usage:
        await send(openai.usage_chunk(request_id, model, parsed, created, generated))
    await send("[DONE]")
    await response.write_eof()
    return response


def build_app(sim: Simulator) -> web.Application:
    app = web.Application()
    app[SIM_KEY] = sim
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    if sim.settings.admin:  # unauthenticated and able to steer the metrics: only when asked for
        app.router.add_route("*", "/admin/workload", admin_workload)
        app.router.add_get("/admin/state", admin_state)
        app.router.add_route("*", "/admin/acceptance", admin_acceptance)

    async def on_startup(app: web.Application) -> None:
        app[SIM_KEY].start()

    async def on_cleanup(app: web.Application) -> None:
        await app[SIM_KEY].stop()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


def serve(settings: SimulatorSettings) -> None:
    """Run the simulator until interrupted (SIGTERM/SIGINT stop it cleanly)."""
    problems = settings.problems()
    if problems:
        raise ValueError("; ".join(problems))

    async def make_app() -> web.Application:
        return build_app(Simulator(settings))

    log.info("simulator: %s method=%s K=%s schedule=%s cost=%s timeScale=%s on %s:%s", settings.model_name,
             settings.method, settings.num_speculative_tokens, settings.schedule, settings.cost_model,
             settings.time_scale, settings.host, settings.port)
    # on SIGTERM aiohttp stops accepting and waits up to shutdown_timeout for the requests in flight: the
    # drain vLLM does with --shutdown-timeout (runtime/argv.py)
    web.run_app(make_app(), host=settings.host, port=settings.port, access_log=None, print=None,
                shutdown_timeout=DRAIN_SECONDS)
