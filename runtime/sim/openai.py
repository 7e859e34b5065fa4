"""OpenAI-compatible request parsing and response bodies, shaped like vLLM's (pure functions).

Generated text is filler: one short word per token, so clients that count tokens by
usage or by chunks see the numbers the engine produced.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

FILLER = (" the", " model", " speaks", " in", " simulated", " tokens", " for", " testing")


class RequestError(ValueError):
    """A request vLLM would answer with 400 (or 404 for an unknown model)."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


@dataclass(frozen=True)
class ParsedRequest:
    chat: bool
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool


def count_prompt_tokens(prompt: Any) -> int:
    """Words stand in for tokens; a list of ints is already token ids."""
    if isinstance(prompt, str):
        return max(1, len(prompt.split()))
    if isinstance(prompt, list) and prompt and all(isinstance(item, int) for item in prompt):
        return len(prompt)
    if isinstance(prompt, list) and prompt:
        return sum(count_prompt_tokens(item) for item in prompt)
    raise RequestError("prompt must be a non-empty string, list of strings or list of token ids", param="prompt")


def _chat_prompt_tokens(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", param="messages")
    total = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):  # content parts
            content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
        total += 4 + (len(content.split()) if isinstance(content, str) else 0)  # role/template overhead
    return total


def parse_request(
    body: Any, *, chat: bool, served_model: str, default_max_tokens: int, max_model_len: int
) -> ParsedRequest:
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != served_model:
        raise RequestError(f"The model `{model}` does not exist.", status=404, param="model")
    prompt_tokens = _chat_prompt_tokens(body.get("messages")) if chat else count_prompt_tokens(body.get("prompt"))
    max_tokens = body.get("max_completion_tokens") if chat else None
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    if max_tokens is None:
        max_tokens = default_max_tokens
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise RequestError(f"max_tokens must be a positive integer, got {max_tokens!r}", param="max_tokens")
    if prompt_tokens + max_tokens > max_model_len:
        raise RequestError(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion).",
            param="max_tokens",
        )
    stream_options = body.get("stream_options") or {}
    return ParsedRequest(
        chat=chat,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=bool(body.get("stream", False)),
        include_usage=bool(stream_options.get("include_usage", False)) if isinstance(stream_options, dict) else False,
    )


def new_request_id(chat: bool) -> str:
    return f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"


def filler_text(start: int, count: int) -> str:
    return "".join(FILLER[(start + i) % len(FILLER)] for i in range(count))


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens}


def error_body(message: str, status: int, param: str | None = None) -> dict[str, Any]:
    kind = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(
        status, "InternalServerError")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def full_response(request_id: str, model: str, parsed: ParsedRequest, text: str, completion_tokens: int,
                  finish_reason: str) -> dict[str, Any]:
    created = int(time.time())
    if parsed.chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": []},
                  "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
        kind = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
        kind = "text_completion"
    return {"id": request_id, "object": kind, "created": created, "model": model, "choices": [choice],
            "usage": usage(parsed.prompt_tokens, completion_tokens)}


def stream_chunk(request_id: str, model: str, parsed: ParsedRequest, created: int, text: str | None,
                 finish_reason: str | None, *, first: bool = False) -> dict[str, Any]:
    if parsed.chat:
        delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {"content": text}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        kind = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
        kind = "text_completion"
    return {"id": request_id, "object": kind, "created": created, "model": model, "choices": [choice]}


def usage_chunk(
    request_id: str, model: str, parsed: ParsedRequest, created: int, completion_tokens: int
) -> dict[str, Any]:
    kind = "chat.completion.chunk" if parsed.chat else "text_completion"
    return {"id": request_id, "object": kind, "created": created, "model": model, "choices": [],
            "usage": usage(parsed.prompt_tokens, completion_tokens)}
