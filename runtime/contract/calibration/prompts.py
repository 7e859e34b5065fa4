"""A prompt file -> prompts. Pure.

One prompt per line; a line that is a JSON object with a string "prompt" stands for that string
(so prompts may hold newlines: JSON Lines as many datasets ship them). Blank lines are skipped.
The text comes from a user's ConfigMap or file: bounded, and refused with a message naming the
line when it cannot be read, never guessed at.
"""

from __future__ import annotations

import json

MAX_PROMPTS_BYTES = 1024 * 1024  # a ConfigMap holds at most 1 MiB
MAX_PROMPTS = 100_000


class PromptsError(ValueError):
    """The prompts cannot be used; the message says why (and which line)."""


def parse_prompts(text: str) -> list[str]:
    if len(text.encode(errors="replace")) > MAX_PROMPTS_BYTES:
        raise PromptsError(f"the prompts take more than {MAX_PROMPTS_BYTES} bytes")
    prompts: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("{"):
            try:
                record = json.loads(stripped)
            except json.JSONDecodeError as error:
                raise PromptsError(f"line {number} starts with '{{' but is not JSON ({error.msg}): write it as a "
                                   'JSON object {"prompt": "..."} or start it with another character') from None
            prompt = record.get("prompt") if isinstance(record, dict) else None
            if not isinstance(prompt, str) or not prompt.strip():
                raise PromptsError(f'line {number} is a JSON object without a non-empty string "prompt"')
            prompts.append(prompt)
        else:
            prompts.append(stripped)
        if len(prompts) > MAX_PROMPTS:
            raise PromptsError(f"more than {MAX_PROMPTS} prompts")
    if not prompts:
        raise PromptsError("there is no prompt in it (only blank lines)")
    return prompts


def read_prompts(raw: bytes) -> list[str]:
    """From a file's bytes: UTF-8 required."""
    if len(raw) > MAX_PROMPTS_BYTES:
        raise PromptsError(f"the prompts take more than {MAX_PROMPTS_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise PromptsError(f"the prompts are not UTF-8 (byte {error.start})") from None
    return parse_prompts(text)
