"""The requests of a load: an OpenAI-compatible completion, streamed and timed the way vLLM defines
its latencies (first token; decode time / (tokens - 1)).

Shared by the calibration program (the pod side: drive.py), `specinfer bench load` and the demo's
load, so every figure they print comes from the same request.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass

import aiohttp

WORKLOAD_HEADER = "X-Specinfer-Workload"  # the simulator honours it; vLLM ignores it
# vLLM's HTTP server closes a connection idle for VLLM_HTTP_TIMEOUT_KEEP_ALIVE = 5 s (vllm/envs.py), aiohttp keeps
# an idle one for 15 s: a request sent on a connection the server is closing that instant fails before any token
# (ServerDisconnectedError). Idle connections are dropped here well before the server drops them.
CLIENT_KEEPALIVE_SECONDS = 2.0
SYNTHETIC_WORDS = ("alpha", "beta", "gamma", "delta", "omega")  # what the synthetic prompts are made of


@dataclass(frozen=True)
class LoadConfig:
    url: str = "http://localhost:8000"
    model: str | None = None
    qps: float | None = None
    concurrency: int | None = None
    prompt_tokens: int = 256
    output_tokens: int = 128
    duration_s: float = 30.0
    workload: str | None = None
    chat: bool = False
    seed: int = 0
    timeout_s: float = 600.0
    prompts: tuple[str, ...] | None = None  # your prompts (drawn at random); None: synthetic ones of prompt_tokens
    temperature: float = 0.0


@dataclass(frozen=True)
class RequestResult:
    ok: bool
    ttft_s: float = 0.0
    per_token_s: float = 0.0
    e2e_s: float = 0.0
    output_tokens: int = 0
    error: str | None = None


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def synthetic_prompt(rng: random.Random, words: int) -> str:
    """A synthetic prompt of `words` words: what a load without prompts of its own sends."""
    return " ".join(rng.choice(SYNTHETIC_WORDS) for _ in range(words))


def connector() -> aiohttp.TCPConnector:
    """The connection pool of every load: no limit, idle connections closed before the engine closes them."""
    return aiohttp.TCPConnector(limit=0, keepalive_timeout=CLIENT_KEEPALIVE_SECONDS)


def request_body(config: LoadConfig, model: str, rng: random.Random) -> dict:
    words = rng.choice(config.prompts) if config.prompts else synthetic_prompt(rng, config.prompt_tokens)
    body: dict = {"model": model, "max_tokens": config.output_tokens, "stream": True,
                  "stream_options": {"include_usage": True}, "ignore_eos": True, "temperature": config.temperature}
    if config.chat:
        body["messages"] = [{"role": "user", "content": words}]
    else:
        body["prompt"] = words
    return body


async def one_request(session: aiohttp.ClientSession, config: LoadConfig, body: dict) -> RequestResult:
    path = "/v1/chat/completions" if config.chat else "/v1/completions"
    headers = {WORKLOAD_HEADER: config.workload} if config.workload else {}
    start = time.perf_counter()
    first: float | None = None
    last = 0.0
    chunks = 0
    usage_tokens = None
    try:
        async with session.post(config.url.rstrip("/") + path, json=body, headers=headers) as response:
            if response.status != 200:
                return RequestResult(ok=False, error=f"HTTP {response.status}: {(await response.text())[:120]}")
            async for raw in response.content:
                line = raw.strip()
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                payload = json.loads(line[6:])
                if payload.get("usage"):
                    usage_tokens = payload["usage"].get("completion_tokens")
                choices = payload.get("choices") or []
                text = (choices[0].get("text") or (choices[0].get("delta") or {}).get("content")) if choices else None
                if text:
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    chunks += 1
    except (aiohttp.ClientError, TimeoutError) as error:
        # where it broke tells why: before any answer (a closed keep-alive connection, a refused one), or
        # mid-stream (the engine stopped or aborted the request)
        where = f"after {chunks} tokens" if chunks else "before any token"
        return RequestResult(ok=False, error=f"{type(error).__name__} {where}: {error}"[:160])
    end = time.perf_counter()
    if first is None:
        return RequestResult(ok=False, error="no tokens in the response")
    tokens = usage_tokens if usage_tokens is not None else chunks
    per_token = (last - first) / (tokens - 1) if tokens > 1 else 0.0
    return RequestResult(ok=True, ttft_s=first - start, per_token_s=per_token, e2e_s=end - start, output_tokens=tokens)


async def served_model(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url.rstrip("/") + "/v1/models") as response:
        response.raise_for_status()
        return (await response.json())["data"][0]["id"]
