"""The demo world's contract: :func:`check` of the ``world`` section by the settings class the
``world`` step reads (:class:`pseudopairs.world.settings.WorldSettings`)."""

from __future__ import annotations

from pseudopairs.world.settings import WorldSettings


def check(config: dict) -> list[str]:
    return WorldSettings.config_errors(config.get("world"))
