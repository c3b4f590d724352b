"""nas.proxies: zero-cost proxies of an untrained network, registered by name.

``get_proxy(name).score(Scorable(net), x, y)`` scores one network; ``score_many`` scores one
network with several proxies, sharing what can be shared; ``proxy_inputs`` draws each proxy's
reference input from the embedded data. A new proxy is one module that registers a ``Proxy``
subclass in ``PROXIES`` and is imported below.
"""

from nas.proxies import (  # noqa: F401  (each module registers its proxy)
    fisher,
    flops,
    grad_norm,
    grasp,
    jacob_cov,
    naswot,
    params,
    snip,
    synflow,
    zen,
)
from nas.proxies.base import (
    PROXIES,
    DataSpec,
    Proxy,
    ProxyError,
    Scorable,
    as_scorable,
    bn_mode,
    get_proxy,
)
from nas.proxies.harness import ProxyInputs, proxy_inputs, score_many

__all__ = [
    "PROXIES",
    "DataSpec",
    "Proxy",
    "ProxyError",
    "ProxyInputs",
    "Scorable",
    "as_scorable",
    "bn_mode",
    "get_proxy",
    "proxy_inputs",
    "score_many",
]
