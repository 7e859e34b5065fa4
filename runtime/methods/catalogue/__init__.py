"""One module per method; importing this package registers them all, in spec-enum order.

The order of MODULES is the order of the CRD's method enum (an import list would be re-sorted by
the linter). Adding a method: its module here, plus its line in MODULES.
"""

import importlib

MODULES = ("none", "eagle", "eagle3", "mtp", "draft_model", "ngram", "suffix", "dflash", "dspark")
for _module in MODULES:
    importlib.import_module(f"{__name__}.{_module}")
