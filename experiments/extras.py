"""Optional dependencies: a feature that needs one says which extra installs it.

The base install carries what every command needs; Parquet export (pyarrow) and the Dask sweep
backend (dask.distributed) are extras (setup.cfg), because together they are most of the install's
weight and serve one feature each. Asking for such a feature without its extra is an input error
naming the flag and the extra, never an ImportError traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from wadiloco.models.errors import InputError

EXTRAS = {"pyarrow": "parquet", "distributed": "dask"}


def require(module: str, feature: str, field: str) -> ModuleType:
    """`module` imported, or an InputError saying how to install the extra that brings it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        extra = EXTRAS[module]
        raise InputError(
            "<command line>",
            field,
            f"{feature} needs the optional extra [{extra}] ({e.name or module} is not installed): "
            f"pip install 'wadiloco-sim[{extra}]', or pip install '.[{extra}]' in a checkout",
        ) from None
