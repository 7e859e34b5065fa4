"""The tuner's pure adapters around the policy: what to ask Prometheus (`queries`), its answers -> an
Observation (`observe`), a resource -> its TuningInput (`target`, `calibrated`, `settings`), a Decision
-> status.tuning (`record`, `convert`), what the engines report in force (`in_force`), status.cost and the
per-resource series (`exports`, `pricing`)."""
