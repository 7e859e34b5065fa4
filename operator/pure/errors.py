"""Every error the operator distinguishes, in one place.

Temporary errors are retried with backoff by the work queue; permanent ones are
reported in status and not retried until the resource changes. An invalid spec is
`specinfer.api.InvalidSpecError` (reported as condition reason InvalidSpec); one the operator
configuration refuses is a `NotAllowedError` (its own reason, e.g. ImageNotAllowed).
"""

from __future__ import annotations

from specinfer.api import InvalidSpecError


class OperatorError(Exception):
    """Base class."""


class ConfigError(OperatorError):
    """The operator's own configuration is unusable (the process refuses to start)."""


class NotAllowedError(InvalidSpecError):
    """A valid spec that the operator configuration does not allow (an image, a Secret: issue 15); reported
    like an invalid spec, under its own condition reason."""

    def __init__(self, field_path: str, message: str, *, reason: str) -> None:
        self.reason = reason
        super().__init__(field_path, message)


class ApiError(OperatorError):
    """A Kubernetes API request failed with an HTTP status."""

    def __init__(self, status: int, method: str, path: str, message: str = "") -> None:
        self.status = status
        self.method = method
        self.path = path
        self.message = message
        super().__init__(f"{method} {path}: HTTP {status} {message}".strip())

    @property
    def retryable(self) -> bool:
        """409 conflicts, throttling and server-side trouble clear up on their own; 4xx input errors do not."""
        return self.status in (409, 429) or self.status >= 500


class TemporaryError(OperatorError):
    """Try again after `delay` seconds (API unreachable, conflict, not ready yet)."""

    def __init__(self, message: str, *, delay: float | None = None) -> None:
        self.delay = delay
        super().__init__(message)


def is_retryable(error: BaseException) -> bool:
    if isinstance(error, ApiError):
        return error.retryable
    if isinstance(error, TemporaryError):
        return True
    # connection refused / reset / timeouts from urllib3 while the API server is away
    return isinstance(error, (OSError, TimeoutError)) or type(error).__module__.startswith("urllib3")
