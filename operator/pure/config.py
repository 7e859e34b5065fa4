"""Operator configuration: one YAML document (the Helm chart mounts it from a ConfigMap).

Everything has a default, so `specinfer operator` and `specinfer render` work with no
file at all. Example:

    images: {nvidia: registry.example/specinfer-runtime:cuda}
    profiles:
      amd: {nodeSelector: {node.kubernetes.io/instance-type: mi300x}, shmSize: 64Gi}
    modelCache: {persistentVolumeClaim: model-cache}
    prometheus: {url: http://prometheus.monitoring:9090, allowedUrls: [], authSecrets: false}
    rateLimit: {qps: 200, burst: 400}
    allowedImages: []          # default: the hardware profiles' images
    engineSecrets: Labelled    # or Any
    cost: {currency: USD, accelerators: {nvidia: 2.5}, products: {NVIDIA-H100-80GB-HBM3: 3.9}}
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from specinfer.api.workload import AcceleratorName
from specinfer.operator.pure.access import PrometheusAccess, base_url_parts, without_userinfo
from specinfer.operator.pure.errors import ConfigError
from specinfer.operator.pure.hardware import DEFAULT_PROFILES, HardwareProfile
from specinfer.operator.tuner.pure.settings import TunerSettings

FIELD_MANAGER = "specinfer-operator"
CONFIG_ENV = "SPECINFER_OPERATOR_CONFIG"


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel)


class ProfileOverride(_Config):
    """Any subset of a HardwareProfile's fields; unset fields keep the default."""

    image: str | None = None
    device_resource: str | None = None
    env: dict[str, str] | None = None
    node_selector: dict[str, str] | None = None
    product_label: str | None = None
    tolerations: list[dict[str, object]] | None = None
    shm_size: str | None = None
    startup_seconds: int | None = Field(default=None, ge=60)
    model_cache_size: str | None = None
    read_only_root_filesystem: bool | None = None


class ModelCache(_Config):
    """Where pods keep downloaded weights: an emptyDir by default, or a shared PVC."""

    persistent_volume_claim: str | None = None
    """Claim name in the resource's namespace (ReadWriteMany so replicas share the weights)."""


class PrometheusConfig(_Config):
    url: str | None = None
    """Default Prometheus for the tuning loop when a resource names none (always allowed)."""
    allowed_urls: list[str] = Field(default_factory=list)
    """Further Prometheus base URLs a resource may name in spec.tuning.prometheus.url (that URL or a path
    below it); any other URL is refused with TuningDegraded PrometheusUrlNotAllowed, nothing is queried."""
    auth_secrets: bool = False
    """Let the tuner read the Secret a resource names in spec.tuning.prometheus.authSecretRef (only Secrets
    labelled specinfer.io/prometheus-auth=true) and send it to an allowed URL."""

    @field_validator("url", "allowed_urls")
    @classmethod
    def _base_urls(cls, value: str | list[str] | None) -> str | list[str] | None:
        for url in [value] if isinstance(value, str) else value or []:
            if base_url_parts(url) is None:
                raise ValueError(f"{without_userinfo(url)!r} must be an http(s) base URL without credentials, "
                                 "query or fragment (credentials belong in a Secret)")
        return value

    def access(self) -> PrometheusAccess:
        return PrometheusAccess(default_url=self.url, allowed_urls=tuple(self.allowed_urls),
                                auth_secrets=self.auth_secrets)


class RateLimit(_Config):
    """Client-side limit on the operator's own API requests (kopf has none).

    Caps a hot loop at a rate the API server absorbs; 200/s lets a burst of 500 new resources
    (3 applies each before any status write) create every Deployment in about 11 s (docs/performance.md).
    """

    qps: float = Field(default=200.0, gt=0)
    burst: int = Field(default=400, ge=1)


PRODUCT_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"  # spec.hardware.product (a label value)
Price = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class CostConfig(_Config):
    """Prices that turn measured throughput into cost per million generated tokens (status.cost).

    A price is per device-hour: one GPU / NPU of the family or product for one hour, so a replica
    costs price x spec.hardware.count. For `cpu`, where spec.hardware.count means nothing, a price is
    per replica-hour: the whole engine pod (the share of the node it runs on). A resource whose
    product and accelerator both have no price gets no cost fields at all: no guess.
    """

    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    """ISO 4217 code the prices are in; shown next to every cost figure."""
    accelerators: dict[AcceleratorName, Price] = Field(default_factory=dict)
    """Price per device-hour by accelerator family (cpu: per replica-hour)."""
    products: dict[Annotated[str, Field(min_length=1, max_length=63, pattern=PRODUCT_PATTERN)], Price] = Field(
        default_factory=dict)
    """Price per device-hour by spec.hardware.product (e.g. NVIDIA-H100-80GB-HBM3); wins over the family's."""


class OperatorConfig(_Config):
    images: dict[AcceleratorName, str] = Field(default_factory=dict)
    """Runtime image per accelerator (shortcut for profiles.<accelerator>.image)."""
    profiles: dict[AcceleratorName, ProfileOverride] = Field(default_factory=dict)
    model_cache: ModelCache = Field(default_factory=ModelCache)
    prometheus: PrometheusConfig = Field(default_factory=PrometheusConfig)
    rate_limit: RateLimit = Field(default_factory=RateLimit)
    cost: CostConfig = Field(default_factory=CostConfig)
    """Prices per accelerator and product, for status.cost (operator/tuner/pure/pricing.py)."""
    tuning: TunerSettings = Field(default_factory=TunerSettings)
    """The tuning loop: window, label mapping, policy defaults (operator/tuner/pure/settings.py)."""
    workers: int = Field(default=16, ge=1, le=128)
    """Concurrent reconciles and API threads (one resource is never reconciled twice at once); a burst is bound
    by API-server latency x concurrency, not by the operator's CPU (docs/performance.md)."""
    resync_seconds: float = Field(default=300.0, ge=5)
    """Every resource is re-checked this often even without events (drift safety net)."""
    field_manager: str = FIELD_MANAGER
    allowed_images: list[str] = Field(default_factory=list)
    """Images spec.runtime.image may name: exact references or `*` patterns. Empty (default): the hardware
    profiles' images only (after `images` / `profiles` overrides), so a tenant cannot pick the pod's code."""
    nudge_pods: bool = True
    """After publishing a new schedule to an engine retuned in place, annotate its pods so the kubelet
    refreshes the mounted ConfigMap now instead of at its next sync (60-90 s with default settings,
    docs/live-schedule.md). Needs `patch` on pods; without it the operator logs once and stops nudging."""
    engine_secrets: Literal["Labelled", "Any"] = "Labelled"
    """Secrets engine pods may take values from (hubTokenSecretRef, env valueFrom.secretKeyRef): Labelled
    (default) only those labelled specinfer.io/engine-secret=true; Any for clusters with one tenant."""

    def image_allowlist(self) -> tuple[list[str], bool]:
        """(allowed images, whether allowedImages was configured)."""
        if self.allowed_images:
            return list(self.allowed_images), True
        return sorted({self.profile(accelerator).image for accelerator in DEFAULT_PROFILES}), False

    def profile(self, accelerator: str) -> HardwareProfile:
        """The default profile with this configuration's overrides applied."""
        base = DEFAULT_PROFILES[accelerator]
        override = self.profiles.get(accelerator)
        update = override.model_dump(exclude_unset=True) if override else {}
        image = self.images.get(accelerator)
        if image and "image" not in update:
            update["image"] = image
        return base.model_copy(update=update) if update else base


def parse_config(data: object, *, source: str = "operator configuration") -> OperatorConfig:
    if data is None:
        return OperatorConfig()
    try:
        return OperatorConfig.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(root)"
        raise ConfigError(f"{source}: {where}: {first['msg']}") from None


def load_config(path: str | Path | None) -> OperatorConfig:
    """Read the YAML file (None: all defaults)."""
    if path is None:
        return OperatorConfig()
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as error:
        raise ConfigError(f"cannot read operator configuration {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"operator configuration {path} is not valid YAML: {error}") from None
    return parse_config(data, source=str(path))
