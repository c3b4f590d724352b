"""Search components: methods that compose with any strategy (``nas.strategies.components.base``).

One module per method: ``sdarts`` (SDARTS-RS / -ADV), ``beta_darts`` (Beta-Decay),
``darts_minus`` (DARTS-'s auxiliary skip), ``pc_darts`` (edge normalisation and warm-up),
``fair_darts`` (sigmoid weights and the zero-one loss), ``hardware_cost`` (the expected-cost
term of ``nas.hardware.cost``). Each has a YAML in ``configs/components``.
"""

from nas.strategies.components.base import Component

__all__ = ["Component"]
