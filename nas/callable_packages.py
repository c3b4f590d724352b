"""``nas.search(...)`` and ``nas.train(...)``: two packages that are also the API's functions.

``nas.search`` is the package of the search strategies and ``nas.train`` the package of the
retraining, and the Python API's two entry points carry the same names (``nas.api.search``,
``nas.api.train``). A package is a module object, so each of the two gets the class below: its
modules and names stay where they are (``nas.search.DARTS``, ``nas.train.run_train``), and
calling the package calls the API function of the same name, whatever was imported first.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class CallablePackage(types.ModuleType):
    """A package whose call is ``nas.api.<last part of its name>``."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from nas import api  # the API imports the command-line layers: only when called

        return getattr(api, self.__name__.rpartition(".")[2])(*args, **kwargs)


def make_callable(package: str) -> None:
    """Give the (imported) package ``package`` the class ``CallablePackage``."""
    sys.modules[package].__class__ = CallablePackage
