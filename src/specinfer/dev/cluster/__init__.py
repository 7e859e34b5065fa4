"""A real local Kubernetes control plane for development, tests and the demo.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (fake
nodes whose pods become Ready) are built from their Go modules through wrapper
modules in tools/, cached outside the repository, and started on loopback.
No Docker, no mocks: see docs/development.md.
"""
