"""One module per method; importing this package registers them all, in spec-enum order."""

from specinfer.runtime.methods.catalogue import (  # noqa: F401  (registration side effects)
    none,
    eagle,
    eagle3,
    mtp,
    draft_model,
    ngram,
    suffix,
    dflash,
    dspark,
)
