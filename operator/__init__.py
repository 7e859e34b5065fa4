"""The operator: one process that turns SpeculativeInference resources into engine pods and keeps them tuned.

Its rooms (docs/architecture.md, "Layers"):

- `handlers/`: kopf's watch events -> the controller (kopf stays there and in `operator_cli.py`);
- `controller.py`: wires the controllers, the cache, the work queues and leadership together;
- `inference/`: the SpeculativeInference controller (children and status);
- `calibration/`: the SpeculativeInferenceCalibration controller (candidate Jobs -> measured status);
- `selection/`: method auto (compares the candidates by calibrations, names the one to serve);
- `tuner/`: the tuning loop (Prometheus -> the policy -> status.tuning) and `tuner/policy/`;
- `render/`: the child manifests, shared by inference and calibration;
- `plumbing/`: the I/O every controller shares (the one write path, the API client, the cache, the
  work queue, Events, Secrets, leadership, the operator's own metrics);
- `pure/`: the pure logic every controller shares (configuration, hardware profiles, errors, access
  rules, conditions, comparing a live object with its rendering);
- `operator_cli.py` (`specinfer operator`) and `render_cli.py` (`specinfer render`): the commands.

A folder named `pure/` holds pure logic only -- no Kubernetes, Prometheus or HTTP client, no module of an
I/O room: `pure/` here is shared by every room, `<room>/pure/` is that room's own; `render/` and
`tuner/policy/` are pure throughout. pyproject.toml's import contracts say the same, and
tests/unit/test_layers.py holds them to the tree.
"""
