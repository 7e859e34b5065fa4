"""The log check the least-privilege tests rely on (tests/support.py `denied_lines`): it must find every
denial the operator logs and nothing else a log line carries -- random names, ports and timestamps."""

from __future__ import annotations

import pytest

from tests.support import denied_lines

pytestmark = pytest.mark.unit

LINE = "[2026-12-06 09:29:00,{ms}] specinfer.operator.r [INFO    ] {text}"


@pytest.mark.parametrize("text", [
    "applied ConfigMap t-gitops-8d403b/llama-runtime (created)",  # a uuid's hex (CI run 32)
    "applied Deployment t-gitops-403abc/llama (updated)",
    "applied Deployment t-gitops-abc403/llama (updated)",
    "serving metrics on 127.0.0.1:38403",
    "pod llama-5d8f-403x9 ready",
    "took 1.403 s",
])
def test_names_ports_and_numbers_are_not_denials(text):
    assert denied_lines(LINE.format(ms="843", text=text)) == []
    assert denied_lines(LINE.format(ms="403", text="reconciled")) == []  # the milliseconds


@pytest.mark.parametrize("text", [
    "cannot create comparison llama-select-1: HTTP 403 forbidden: quota exceeded",
    "(403)\\nReason: Forbidden",
    "patch failed: 403",
    "APIForbiddenError: deployments.apps is forbidden: User cannot patch",
    "status=403 path=/apis/apps/v1/namespaces/x/deployments",
])
def test_denials_are_found(text):
    assert denied_lines(LINE.format(ms="843", text=text)) != []
