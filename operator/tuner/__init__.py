"""The tuning loop: every tick, Prometheus -> the policy -> status.tuning (docs/tuner.md).

I/O here: `loop` (the loop), `prometheus` and `bounded_http` (queries with a bounded answer),
`recording` (the record of every decision) and `cli` (`specinfer tuner replay`). Pure: `policy/` (the
decision) and `pure/` (its adapters: the queries, the answers -> an observation, the resource -> the
tuning input, the decision -> status, cost and exports)."""
