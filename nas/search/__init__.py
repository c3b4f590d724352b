"""nas.search: search strategies and the search loop.

Calling the package runs a search: ``nas.search(space="nb201", strategy="drnas")`` is
``nas.api.search`` (``nas.callable_packages``).
"""

from nas.callable_packages import make_callable
from nas.search.base import SearchContext, SearchStrategy, Shards
from nas.search.darts import DARTS
from nas.search.drnas import DrNAS
from nas.search.fbnet import FBNet
from nas.search.gdas import GDAS
from nas.search.proxylessnas import ProxylessNAS
from nas.search.reinmax import ReinMax
from nas.search.rsws import RSWS
from nas.search.snas import SNAS

__all__ = [
    "DARTS",
    "FBNet",
    "GDAS",
    "ProxylessNAS",
    "RSWS",
    "ReinMax",
    "SNAS",
    "DrNAS",
    "SearchContext",
    "SearchStrategy",
    "Shards",
]

make_callable(__name__)
