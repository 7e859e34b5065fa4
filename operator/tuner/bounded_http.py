"""A requests Session that refuses response bodies above a size, for the Prometheus client.

A tenant may name its own Prometheus (spec.tuning.prometheus.url): its answer is hostile input, and
prometheus-api-client would read a body of any size into memory before we could look at it. This
session streams the body and stops at `max_bytes` (after decompression), so one tenant's answer
costs the operator at most that much memory.
"""

from __future__ import annotations

from typing import Any

import requests

CHUNK_BYTES = 64 * 1024


class ResponseTooLarge(requests.RequestException):
    """The response body exceeded the configured limit; the message says by how much."""


class BoundedSession(requests.Session):
    def __init__(self, max_bytes: int) -> None:
        super().__init__()
        self.max_bytes = max_bytes

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs["stream"] = True
        response = super().request(method, url, *args, **kwargs)
        body = bytearray()
        for chunk in response.iter_content(CHUNK_BYTES):
            body += chunk
            if len(body) > self.max_bytes:
                response.close()
                raise ResponseTooLarge(f"the response body exceeds {self.max_bytes} bytes "
                                       "(tuning.maxResponseBytes of the operator configuration)")
        # requests keeps a read body here; .content, .text and .json() use it (Response.content)
        response._content = bytes(body)
        return response
