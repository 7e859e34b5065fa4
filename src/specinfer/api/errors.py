"""`InvalidSpecError`: a spec that cannot serve, with the field to fix (parse_spec raises it; so does
`serving_spec` for a method-auto candidate that cannot serve)."""

from __future__ import annotations


class InvalidSpecError(ValueError):
    """A spec that cannot serve. `field_path` is e.g. "spec.speculation.draftModel"."""

    def __init__(self, field_path: str, message: str, problems: list[tuple[str, str]] | None = None):
        self.field_path = field_path
        self.message = message
        self.problems = problems or [(field_path, message)]
        super().__init__(self._describe(field_path, message))

    @staticmethod
    def _describe(field_path: str, message: str) -> str:
        return message if message.startswith(field_path) else f"{field_path}: {message}"

    def describe_all(self) -> str:
        """Every problem, one per line (for Events and `specinfer render`)."""
        return "\n".join(self._describe(path, message) for path, message in self.problems)
