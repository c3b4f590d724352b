"""Packaging hook: ship the top-level ``configs/`` folder inside the package as ``nas.configs``.

Everything else is declared in ``pyproject.toml``. ``configs/`` stays at the top of the
repository (where the design puts it and where editable installs and source checkouts read
it); this maps it to ``nas/configs`` in wheels and non-editable installs, so ``nas-search`` and
``nas-train`` find their configs from any folder (``nas.choices.config_dir``).
"""

from setuptools import find_packages, setup

PACKAGES = find_packages(include=["nas", "nas.*", "search_spaces", "search_spaces.*"])

setup(
    packages=[*PACKAGES, "nas.configs"],
    package_dir={"nas.configs": "configs"},
)
