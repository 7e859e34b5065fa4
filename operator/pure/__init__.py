"""Pure logic every room of the operator shares: the operator's configuration (`config`) and hardware
profiles (`hardware`), the errors it tells apart (`errors`), what a tenant may use (`access`: images,
Prometheus URLs, opted-in Secrets), status conditions (`conditions`), and whether a live object already
holds a rendering (`compare`). No I/O."""
