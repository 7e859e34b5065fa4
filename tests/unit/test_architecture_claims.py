"""The checkable claims of docs/architecture.md hold on the source, not only on the page:

- every label and annotation key the operator writes or selects by, and every ownerReferences entry,
  comes from one module, `operator/render/labels.py` (a key spelled twice drifts: a selector that no
  longer matches what the renderer labels loses its children in silence);
- every write to the Kubernetes API goes through `operator/plumbing/kube.py`, where each write names its field
  manager (a write beside it escapes the "Who writes what" table and the tests of the writers).

Each check runs on the repository and on a probe that must be caught, so it cannot pass by finding nothing.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from specinfer.operator.render import labels as labels_module

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LABELS_MODULE = Path("operator/render/labels.py")
KUBE_MODULE = Path("operator/plumbing/kube.py")

# Key domains the operator uses: its own, the recommended app labels it writes, and the Job controller's
# label it selects by. Other domains (a fake node's kubernetes.io/hostname) are not the operator's.
KEY = re.compile(r"(?<![\w./-])((?:specinfer|app\.kubernetes|batch\.kubernetes)\.io/[A-Za-z0-9](?:[-A-Za-z0-9_.]*"
                 r"[A-Za-z0-9])?)")
API_VERSION = re.compile(r"specinfer\.io/v\d+(?:(?:alpha|beta)\d+)?$")  # a group/version, not a key
# specinfer.io keys that are not the operator's: no operator code writes or selects by them.
NOT_THE_OPERATORS = {
    "specinfer.io/generated-by": "the CRD files' marker, written by `specinfer crd` (the API layer)",
    "specinfer.io/vllm-version": "the chart's annotation (charts/specinfer/Chart.yaml), read by its NOTES",
}
KEY_LITERALS_ALLOWED = {("src/specinfer/api/crd.py", "specinfer.io/generated-by")}


def _python_files(*folders: str, skip: tuple[str, ...] = ()) -> Iterator[Path]:
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if not any(relative.is_relative_to(s) for s in skip):
                yield relative


def _product_files() -> Iterator[Path]:
    """The operator, the pod side, the API and the CLI. The simulator and the dev tools stand beside them (the
    pod runner plays the kubelet with its own client)."""
    return _python_files("operator", "runtime", "src/specinfer", skip=("src/specinfer/dev", "runtime/sim"))


def _prose(tree: ast.AST) -> set[int]:
    """ids of docstrings (a bare string statement: a module's, a class's, a function's, a field's)."""
    return {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def _strings(tree: ast.AST) -> Iterator[tuple[str, bool]]:
    """Every string constant (f-string parts included) and whether it is prose."""
    prose = _prose(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value, id(node) in prose


def _keys(text: str) -> list[str]:
    return [key for key in KEY.findall(text) if not API_VERSION.match(key)]


def _module_keys() -> dict[str, str]:
    """The module's keys: its constants named *_LABEL or *_ANNOTATION, by value."""
    return {value: name for name, value in vars(labels_module).items()
            if name.endswith(("_LABEL", "_ANNOTATION")) and isinstance(value, str)}


def key_literals(source: str) -> list[str]:
    """Label or annotation keys spelled in code (not in a docstring)."""
    known = set(_module_keys())
    found = []
    for text, prose in _strings(ast.parse(source)):
        if not prose:
            found += _keys(text) + [key for key in known if key in text and key not in _keys(text)]
    return found


def mentioned_keys(text: str) -> set[str]:
    return {key for key in _keys(text) if key.startswith("specinfer.io/")}


def test_no_label_or_annotation_key_is_spelled_outside_the_labels_module():
    found = set()
    for path in _python_files("operator", "runtime", "src", "bench", "tools"):
        if path != LABELS_MODULE:
            found |= {(str(path), key) for key in key_literals((ROOT / path).read_text())}
    assert found - KEY_LITERALS_ALLOWED == set(), "import these keys from operator/render/labels.py"


def test_the_probe_catches_a_key_spelled_beside_the_module():
    probe = ('"""Selects by specinfer.io/name (prose may name a key)."""\n'
             'SELECTOR = "specinfer.io/selection"\n'
             'query = f"{x}=1,app.kubernetes.io/managed-by={y}"\n'
             'jq = \'.metadata.labels["batch.kubernetes.io/job-name"]\'\n'
             'VERSION = "specinfer.io/v1alpha1"\n')
    assert sorted(key_literals(probe)) == ["app.kubernetes.io/managed-by", "batch.kubernetes.io/job-name",
                                           "specinfer.io/selection"]


def test_every_key_the_docs_and_docstrings_name_is_one_the_operator_has():
    """A renamed key leaves no page, chart comment or docstring naming the old one."""
    known = set(_module_keys()) | set(NOT_THE_OPERATORS)
    mentioned: set[tuple[str, str]] = set()
    for path in _python_files("operator", "runtime", "src", "bench", "tools"):
        for text, prose in _strings(ast.parse((ROOT / path).read_text())):
            if prose:
                mentioned |= {(str(path), key) for key in mentioned_keys(text)}
    pages = [ROOT / "README.md", *[p for folder in ("docs", "charts", "examples", "crds")
                                   for p in sorted((ROOT / folder).rglob("*"))
                                   if p.suffix in (".md", ".yaml", ".yml", ".json", ".txt", ".tpl")]]
    for page in pages:
        mentioned |= {(str(page.relative_to(ROOT)), key) for key in mentioned_keys(page.read_text())}
    assert mentioned, "the docs name the pod labels: the scan found none, so it reads nothing"
    assert {(where, key) for where, key in mentioned if key not in known} == set()


def test_the_prometheus_labels_the_tuner_and_alerts_read_are_the_pod_labels_the_podmonitor_keeps():
    """The PodMonitor copies the pod labels onto every series (podTargetLabels), each character Prometheus
    does not take in a label name becoming `_`: a renamed pod label must rename what the tuner selects by."""
    from specinfer.monitoring import alerts, panels
    from specinfer.operator.tuner.pure import queries, settings
    def prometheus_name(key: str) -> str:
        return re.sub(r"[^a-zA-Z0-9_]", "_", key)

    name = prometheus_name(labels_module.NAME_LABEL)
    assert name == settings.Labels().resource == queries.LabelMapping().resource == panels.Labels().resource
    assert prometheus_name(labels_module.METHOD_LABEL) == alerts.METHOD_LABEL


def _owner_references_built(source: str) -> list[str]:
    """Dicts or assignments that set ownerReferences (reading them is everyone's business)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "ownerReferences"
                                              for k in node.keys):
            found.append(ast.unparse(node)[:80])
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.slice, ast.Constant) and node.slice.value == "ownerReferences":
            found.append(ast.unparse(node))
    return found


def test_ownership_is_built_in_the_labels_module_only():
    found = {(str(path), built) for path in _product_files() if path != LABELS_MODULE
             for built in _owner_references_built((ROOT / path).read_text())}
    assert found == set(), "build ownerReferences with operator/render/labels.py owner_references"
    assert _owner_references_built('m = {"ownerReferences": [ref]}\nmeta["ownerReferences"] = refs\n') \
        == ["{'ownerReferences': [ref]}", "meta['ownerReferences']"]


# -- the one write path -------------------------------------------------------------------------------

READS = {"GET", "HEAD"}


def _client_write_methods() -> frozenset[str]:
    """Every method of the official client's API classes that writes (create_namespaced_pod, patch_..., ...)."""
    from kubernetes import client

    verbs = ("create_", "patch_", "replace_", "delete_", "connect_post_", "connect_put_", "connect_patch_",
             "connect_delete_")
    return frozenset(name for cls_name in dir(client) if cls_name.endswith("Api")
                     for name in dir(getattr(client, cls_name)) if name.startswith(verbs))


def api_writes(source: str, client_writes: frozenset[str]) -> list[str]:
    """Calls that write to the API: `x.request(<verb>, ...)` with a verb other than GET (or one not spelled
    out), a write method of the official client, or the raw client (call_api, param_serialize). A subclass
    forwarding its own `request` to `super()` is not a call of ours (tuner/bounded_http.py, for Prometheus)."""
    found = []
    calls = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)]
    for node in sorted(calls, key=lambda call: (call.lineno, call.col_offset)):
        if not isinstance(node.func, ast.Attribute):
            continue
        name = node.func.attr
        if name == "request":
            forwarded = isinstance(node.func.value, ast.Call) and ast.unparse(node.func.value.func) == "super"
            verb = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "method"), None)
            spelled = verb.value.upper() if isinstance(verb, ast.Constant) and isinstance(verb.value, str) else None
            if not forwarded and spelled not in READS:
                found.append(ast.unparse(node)[:100])
        elif name in client_writes or name in ("call_api", "param_serialize"):
            found.append(ast.unparse(node)[:100])
    return found


def test_every_write_to_the_api_goes_through_kube_py():
    writes = _client_write_methods()
    found = {(str(path), call) for path in _product_files() if path != KUBE_MODULE
             for call in api_writes((ROOT / path).read_text(), writes)}
    assert found == set(), "write through operator/plumbing/kube.py (server_side_apply, create, annotate, delete)"


def test_the_probe_catches_a_write_beside_kube_py():
    writes = _client_write_methods()
    assert {"patch_namespaced_pod", "create_namespaced_job", "delete_namespaced_job"} <= writes
    probe = ('await kube.request("PATCH", path, body=body)\n'
             'await kube.request(method, path)\n'
             'await kube.request("GET", path)\n'
             'core.patch_namespaced_pod(name, namespace, body)\n'
             'api.call_api("POST", url)\n'
             'return super().request(method, url, **kwargs)\n')
    assert api_writes(probe, writes) == ["kube.request('PATCH', path, body=body)", "kube.request(method, path)",
                                         "core.patch_namespaced_pod(name, namespace, body)",
                                         "api.call_api('POST', url)"]
