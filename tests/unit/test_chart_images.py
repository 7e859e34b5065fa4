"""One set of image names: the chart's values, the operator's hardware profiles, the Dockerfiles and
docs/install.md must name the same images and tags (they cannot be built here, so this is the check)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from specinfer import VLLM_VERSION, __version__
from specinfer.operator.pure.hardware import DEFAULT_PROFILES
from specinfer.runtime.methods import ACCELERATORS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specinfer"
DOCKER = ROOT / "docker"
INSTALL_DOC = ROOT / "docs" / "install.md"

RUNTIME_ROW = re.compile(r"^\| (\w+) \| `([^`]+)` \| `([^`]+)` \| `([^`]+)` \|$", re.M)
OPERATOR_ROW = re.compile(r"^\| `([^`]+)` \| `(docker/operator\.Dockerfile)` \|$", re.M)


def values() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def chart() -> dict:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())


def doc_runtime_rows() -> dict[str, tuple[str, str, str]]:
    rows = {acc: (base, image, dockerfile) for acc, base, image, dockerfile in
            RUNTIME_ROW.findall(INSTALL_DOC.read_text())}
    assert rows, "docs/install.md has no runtime image table"
    return rows


def from_images(dockerfile: Path) -> list[str]:
    return re.findall(r"^FROM\s+(\S+)", dockerfile.read_text(), re.M)


def build_tag(dockerfile: Path) -> str:
    """The `docker build ... -t IMAGE .` line in the Dockerfile's header comment."""
    match = re.search(r"^#\s+docker build -f \S+ -t (\S+) \.$", dockerfile.read_text(), re.M)
    assert match, f"{dockerfile.name}: header must show the docker build command with its tag"
    return match.group(1)


def test_chart_version_is_the_distribution_version_and_pins_vllm():
    assert chart()["appVersion"] == __version__ == chart()["version"]
    assert chart()["annotations"]["specinfer.io/vllm-version"] == VLLM_VERSION


def test_chart_runtime_images_are_the_operators_defaults():
    """Installing the chart with default values changes no image the operator would pick on its own."""
    assert values()["runtime"]["images"] == {acc: profile.image for acc, profile in DEFAULT_PROFILES.items()}, (
        "charts/specinfer/values.yaml runtime.images: one per accelerator, the operator's default image")


def test_every_accelerator_has_a_runtime_image_dockerfile_and_doc_row():
    accelerators = set(ACCELERATORS)
    assert set(values()["runtime"]["images"]) == accelerators, "charts/specinfer/values.yaml runtime.images"
    dockerfiles = {p.stem.removeprefix("runtime-") for p in DOCKER.glob("runtime-*.Dockerfile")}
    assert dockerfiles == accelerators, "docker/runtime-<accelerator>.Dockerfile: one per accelerator"
    assert set(doc_runtime_rows()) == accelerators, "docs/install.md: one runtime image row per accelerator"


@pytest.mark.parametrize("accelerator", sorted(ACCELERATORS))
def test_runtime_dockerfile_matches_chart_and_docs(accelerator):
    rows = doc_runtime_rows()
    assert accelerator in rows, f"docs/install.md: no runtime image row for {accelerator}"
    base, image, dockerfile_name = rows[accelerator]
    dockerfile = ROOT / dockerfile_name
    assert dockerfile == DOCKER / f"runtime-{accelerator}.Dockerfile"
    assert from_images(dockerfile) == [base], f"{dockerfile_name}: FROM must be the documented base image {base}"
    release = ACCELERATORS[accelerator].engine  # the engine release the catalogue says this accelerator runs
    assert base.endswith(f":{release.image_tag}"), f"{base}: the base image must be the pinned {release.label}"
    assert build_tag(dockerfile) == image == values()["runtime"]["images"][accelerator]
    text = dockerfile.read_text()
    assert f'org.opencontainers.image.base.name="{base}"' in text
    assert f'org.opencontainers.image.version="{image.rsplit(":", 1)[1]}"' in text
    assert f"vllm{release.version}" in image and image.split(":")[1].startswith(__version__)


def test_operator_dockerfile_matches_chart_and_docs():
    dockerfile = DOCKER / "operator.Dockerfile"
    image = f"{values()['image']['repository']}:{values()['image']['tag'] or chart()['appVersion']}"
    assert build_tag(dockerfile) == image
    assert OPERATOR_ROW.findall(INSTALL_DOC.read_text()) == [(image, "docker/operator.Dockerfile")]
    assert f'org.opencontainers.image.version="{chart()["appVersion"]}"' in dockerfile.read_text()
    python = {tag.split(":")[1].split("-")[0] for tag in from_images(dockerfile)}
    requires = re.search(r'requires-python = ">=(\d+\.\d+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert python == {requires}, f"operator image Python {python} vs pyproject requires-python >={requires}"


def test_entrypoints_are_the_commands_the_chart_and_operator_run():
    """The chart and the operator set the container command explicitly; the images agree with them."""
    from specinfer.operator.render.deployment import build_deployment  # noqa: F401  (module holds the command)

    deployment = (CHART / "templates" / "deployment.yaml").read_text()
    assert 'command: ["specinfer", "operator"]' in deployment
    assert 'ENTRYPOINT ["specinfer", "operator"]' in (DOCKER / "operator.Dockerfile").read_text()
    render_source = (ROOT / "operator" / "render" / "deployment.py").read_text()
    assert '"command": ["specinfer", "runtime"]' in render_source
    for dockerfile in DOCKER.glob("runtime-*.Dockerfile"):
        assert 'ENTRYPOINT ["specinfer", "runtime"]' in dockerfile.read_text(), dockerfile.name


def test_no_floating_tags_anywhere():
    images = [*values()["runtime"]["images"].values()]
    for dockerfile in DOCKER.glob("*.Dockerfile"):
        images += from_images(dockerfile)
    for image in images:
        assert ":" in image and not image.endswith((":latest", ":main", ":nightly")), image
