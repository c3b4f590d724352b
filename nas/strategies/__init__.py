"""nas.strategies: the search strategies, their components and the search data.

Third stage of the pipeline: a strategy owns the architecture parameters and trains them with
the supernet's weights (``nas.pipeline.search`` drives it). Runs start from the Python API,
``nas.search(...)`` (``nas.api``), or ``nas-search``.
"""

from nas.strategies.base import SearchContext, SearchStrategy, Shards
from nas.strategies.darts import DARTS
from nas.strategies.drnas import DrNAS
from nas.strategies.fbnet import FBNet
from nas.strategies.gdas import GDAS
from nas.strategies.proxylessnas import ProxylessNAS
from nas.strategies.reinmax import ReinMax
from nas.strategies.rsws import RSWS
from nas.strategies.snas import SNAS

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
