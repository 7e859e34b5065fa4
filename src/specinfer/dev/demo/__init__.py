"""`specinfer demo`: the whole product on the local control plane with the simulator engine."""
