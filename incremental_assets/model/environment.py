"""Environments: a project's changed models built apart from production, under
``<warehouse>/__env/<name>/<schema>/<table>``, with a manifest ``<warehouse>/__env/<name>/environment.json``.

Only the models an environment builds have tables there; every other model is read from production in
place. Which table a model's readers and writers use is decided in one place, :meth:`Settings.table_location
<incremental_assets.model.settings.Settings.table_location>`, from the environment in effect.

>>> env_root("/w", "dev")
'/w/__env/dev'
>>> check_name("Dev")  # doctest: +NORMALIZE_WHITESPACE
Traceback (most recent call last):
...
incremental_assets.errors.SelectionError: environment name 'Dev' is not valid: it must match [a-z][a-z0-9_]*
and not be 'prod' (fix: e.g. --env dev)
"""

from __future__ import annotations

import re

from incremental_assets.errors import SelectionError

ENV_DIR = "__env"
MANIFEST = "environment.json"
PRODUCTION = "prod"
_NAME = re.compile(r"[a-z][a-z0-9_]*")
KEY_PREFIX = "env"  # an environment's Dagster asset keys: ["env", NAME, *the model's key]


def is_name(name: str) -> bool:
    """Whether ``name`` can name an environment."""
    return bool(_NAME.fullmatch(name or "")) and name != PRODUCTION


def check_name(name: str) -> str:
    """``name`` when it can name an environment; a SelectionError saying what can otherwise."""
    if not is_name(name):
        raise SelectionError(
            f"environment name '{name}' is not valid: it must match [a-z][a-z0-9_]* and not be "
            f"'{PRODUCTION}' (fix: e.g. --env dev)"
        )
    return name


def envs_root(warehouse: str) -> str:
    """The folder holding every environment of a warehouse."""
    return warehouse.rstrip("/") + "/" + ENV_DIR


def env_root(warehouse: str, name: str) -> str:
    """The folder of one environment: its tables (``<schema>/<table>``) and its manifest."""
    return envs_root(warehouse) + "/" + name


def manifest_uri(warehouse: str, name: str) -> str:
    return env_root(warehouse, name) + "/" + MANIFEST


def table_location(warehouse: str, model_name: str, environment: str | None = None) -> str:
    """A model's table: ``<warehouse>/<schema>/<table>`` in production, under the environment's folder otherwise.

    >>> table_location("/w", "shop.orders"), table_location("/w/", "shop.orders", "dev")
    ('/w/shop/orders', '/w/__env/dev/shop/orders')
    """
    base = env_root(warehouse, environment) if environment else warehouse.rstrip("/")
    return base + "/" + "/".join(model_name.split("."))
