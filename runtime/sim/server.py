"""The simulator's HTTP server: vLLM's OpenAI-compatible API and /metrics over the simulated engine.

One asyncio task steps the engine; each step sleeps for its simulated duration (scaled
by time_scale) and then hands every request its new tokens. Steps are scheduled
back-to-back in simulated time, so sleep overshoot does not inflate step latencies;
when the process cannot keep up, the engine resynchronises with the clock and counts
the lag (GET /admin/state shows it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from specinfer.runtime.sim import openai
from specinfer.runtime.sim.clock import ScaledClock, phase_workload
from specinfer.runtime.sim.engine import Engine, SimRequest
from specinfer.runtime.sim.metrics import build_sinks
from specinfer.runtime.sim.model import WORKLOADS
from specinfer.runtime.sim.settings import SimulatorSettings

log = logging.getLogger("specinfer.sim")

VLLM_VERSION = "0.33.0"
WORKLOAD_HEADER = "X-Specinfer-Workload"  # optional per-request workload (ignored by a real vLLM)
LAG_TOLERANCE_WALL_S = 0.05


class Simulator:
    """Engine + clock + metrics, driven by one engine-loop task."""

    def __init__(self, settings: SimulatorSettings, *, clock: ScaledClock | None = None) -> None:
        self.settings = settings
        self.engine = Engine(settings)
        self.clock = clock or ScaledClock(settings.time_scale)
        self.registry = CollectorRegistry()
        self.sinks = build_sinks(self.registry, model_name=settings.model_name, engine=settings.engine_label,
                                 num_speculative_tokens=settings.num_speculative_tokens if settings.speculative else 0,
                                 max_model_len=settings.max_model_len)
        self.workload_override: str | None = None
        self.lag_s = 0.0
        self.steps = 0
        self._wake = asyncio.Event()
        self._last_end = 0.0
        self._task: asyncio.Task | None = None
        self.failure: str | None = None  # set when the engine loop died: /health then fails

    # -- lifecycle ------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.failure is None and self.clock.now() >= self.settings.startup_s

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    # -- workload -------------------------------------------------------------------
    def current_workload(self) -> str:
        if self.workload_override is not None:
            return self.workload_override
        return phase_workload(self.settings.phases, self.clock.now(), self.settings.workload)

    def set_workload(self, workload: str) -> None:
        self.engine.set_workload(workload)
        self.workload_override = workload

    # -- requests -------------------------------------------------------------------
    def submit(self, request: SimRequest) -> None:
        self.engine.add(request)
        for sink in self.sinks:
            sink.set_queue(len(self.engine.running), len(self.engine.waiting))
        self._wake.set()

    # -- engine loop ----------------------------------------------------------------
    async def _run(self) -> None:
        try:
            await self._loop()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a bug must not leave a server that accepts requests and never answers
            self.failure = f"{type(error).__name__}: {error}"
            log.exception("simulator engine loop failed; /health now reports 500")
            for request in [*self.engine.waiting, *self.engine.running]:  # answer everyone still waiting
                if request.finish_reason is None:
                    request.finish_reason = "error"
                    if request.sink is not None:
                        request.sink(0, "error")

    async def _loop(self) -> None:
        tolerance = LAG_TOLERANCE_WALL_S * self.clock.time_scale
        while True:
            if self.engine.idle:
                self._wake.clear()
                await self._wake.wait()
                self._last_end = self.clock.now()
            now = self.clock.now()
            start = self._last_end
            if now - start > tolerance:  # the process fell behind: resynchronise and account for it
                self.lag_s += now - start
                start = now
            workload = self.current_workload()
            if workload != self.engine.workload:
                self.engine.set_workload(workload)
            plan = self.engine.plan_step(start)
            end = start + plan.duration
            delay = self.clock.wall_seconds(end - self.clock.now())
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # let handlers run even when stepping flat out
            stats = self.engine.complete_step(plan, end)
            self._last_end = end
            self.steps += 1
            for sink in self.sinks:
                sink.observe_step(stats)

    def state(self) -> dict[str, Any]:
        s = self.settings
        return {
            "model": s.model_name, "method": s.method, "numSpeculativeTokens": s.num_speculative_tokens,
            "schedule": [list(r) for r in s.schedule] if s.schedule else None, "costModel": s.cost_model,
            "workload": self.engine.workload, "timeScale": s.time_scale, "maxBatchSize": s.max_batch_size,
            "simulatedSeconds": self.clock.now(), "steps": self.steps, "lagSeconds": self.lag_s,
            "running": len(self.engine.running), "waiting": len(self.engine.waiting), "ready": self.ready,
        }


# -- HTTP ---------------------------------------------------------------------------
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
    app.router.add_route("*", "/admin/workload", admin_workload)
    app.router.add_get("/admin/state", admin_state)

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
    web.run_app(make_app(), host=settings.host, port=settings.port, access_log=None, print=None)
