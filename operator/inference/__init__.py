"""The SpeculativeInference controller: `reconciler` (I/O) renders a resource's children, applies what
differs and writes its status; `pure/` decides that status (`status`) and reads the engine pods'
failures (`engine_failures`). The children themselves are built in operator/render/."""
