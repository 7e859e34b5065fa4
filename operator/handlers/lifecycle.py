"""Operator start and stop: kopf settings, the peering object, the controller."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from specinfer.operator.controller import Controller
from specinfer.operator.handlers.children import CHILD_RESOURCES
from specinfer.operator.plumbing.kube import object_path
from specinfer.operator.plumbing.leadership import peering_objects
from specinfer.operator.pure.errors import ApiError
from specinfer.operator.render.labels import CHILD_SELECTOR

log = logging.getLogger("specinfer.operator")

# The API server ends each watch after this long and kopf re-lists: a watch that silently
# stops delivering (kopf#585) can never stay stuck for longer.
WATCH_SERVER_TIMEOUT = 60
WATCH_CLIENT_TIMEOUT = 90         # the HTTP request itself, should the server never close it
WATCH_INACTIVITY_TIMEOUT = 75     # no event and no bookmark for this long: reconnect
PEERING_LIFETIME = 30             # a dead active replica is replaced within about this long
# kopf retries a failed request (watches included) after each of these delays, then starts over.
# Its default (1, 1, 2, 3, 5, 8, 13, 21) leaves a 21 s gap late in an API-server outage, so work
# could resume up to 21 s after the API came back; capped at 5 s it resumes within ~5 s
# (tests/e2e/faults/test_control_plane_faults.py).
ERROR_BACKOFFS = (1, 1, 2, 3, 5, 5, 5, 5)


def _selector_key(group_version: str, plural: str) -> tuple[str, str] | tuple[str, str, str]:
    """kopf's resource key: (version, plural) for the core group, else (group, version, plural)."""
    group, _, version = group_version.rpartition("/")
    return (group, version, plural) if group else (version, plural)


def configure(settings: kopf.OperatorSettings) -> None:
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT
    settings.watching.client_timeout = WATCH_CLIENT_TIMEOUT
    settings.watching.connect_timeout = 10
    settings.watching.inactivity_timeout = WATCH_INACTIVITY_TIMEOUT
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 10
    settings.networking.error_backoffs = ERROR_BACKOFFS
    for group_version, plural in CHILD_RESOURCES:
        settings.watching.label_selectors[_selector_key(group_version, plural)] = CHILD_SELECTOR
    # our own Events say what happened; kopf posts only its warnings and errors
    settings.posting.enabled = True
    settings.posting.level = logging.WARNING
    settings.peering.lifetime = PEERING_LIFETIME
    settings.peering.stealth = True


async def ensure_peering_object(controller: Controller, name: str, namespaces: tuple[str, ...]) -> None:
    """kopf needs the (Cluster)KopfPeering object to exist; create it so a second replica can see the first."""
    for peering in peering_objects(name, namespaces):
        try:
            await controller.kube.create(peering, field_manager=controller.options.config.field_manager)
        except ApiError as error:
            if error.status != 409:
                log.warning("cannot create %s %s: %s", peering["kind"], object_path(peering), error)


def register(registry: kopf.OperatorRegistry) -> None:
    @kopf.on.startup(registry=registry)
    async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        configure(settings)
        from specinfer.operator.plumbing.client import api_client

        # one connection per request thread (Kube runs `workers` threads) plus the tuning loop's
        controller = Controller(memo.options, api_client(connections=memo.options.config.workers + 8))
        if memo.options.peering:
            await ensure_peering_object(controller, memo.options.peering, memo.options.namespaces)
        await controller.start()
        memo.controller = controller

    @kopf.on.cleanup(registry=registry)
    async def stop(memo: kopf.Memo, **_: Any) -> None:
        controller = getattr(memo, "controller", None)
        if controller is not None:
            await controller.stop()
