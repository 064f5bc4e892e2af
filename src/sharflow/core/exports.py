"""Entry points a stage package names in its __init__, imported only when first used.

A stage's __init__ lists what the stage offers without importing it: a job imports only the modules
it runs (the shard job never pays for pandas because the dataset package also offers tables), so
job start-up does not grow with the package (PEP 562 module __getattr__).

Example::

    __getattr__ = lazy_exports(__name__, {"prepare_dataset": "job"})  # sharflow.prepare.job
"""

import importlib
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], object]:
    """A module __getattr__ for `package` that imports `name` from `package.<exports[name]>` on use."""

    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)

    return __getattr__
