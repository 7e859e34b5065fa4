"""kopf handlers: thin adapters from watch events to the controller (no logic here).

Only low-level event handlers are used: kopf then writes nothing to the resource --
no finalizer, no progress or last-handled annotations -- so GitOps tools see no drift.
"""

from __future__ import annotations

import kopf

from specinfer.operator.handlers import calibrations, children, lifecycle, resources, tuning


def build_registry() -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    # a private registry does not inherit kopf's default login handlers
    kopf.on.login(registry=registry)(kopf.login_via_client)
    lifecycle.register(registry)
    resources.register(registry)
    children.register(registry)
    calibrations.register(registry)
    tuning.register(registry)  # after lifecycle: it needs the started controller
    return registry
