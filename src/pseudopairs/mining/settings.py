"""The config's ``mining`` section: how the mining engine runs (the criterion and its parameters
belong to each pseudopair set; see :mod:`pseudopairs.mining.criteria`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pseudopairs.mining.criteria import DEFAULT_CRITERION, check_params
from pseudopairs.settings import DEVICES, Settings, setting


@dataclass(frozen=True)
class MiningSettings(Settings):
    """The config's ``mining`` section: how the engine runs (the criterion and its parameters
    belong to each pseudopair set)."""

    SECTION = "mining"

    device: str = setting("auto", kind=str, choices=DEVICES, doc="auto | cpu | cuda")
    block_size: int | None = setting(None, kind=int, low=1, optional=True,
                                     doc="query rows per score block (null: automatic)")
    encode_batch_size: int = setting(256, kind=int, low=1, doc="captions per encoder batch")
    threads: int = setting(1, kind=int, low=1, doc="CPU threads")


ENGINE_KEYS = tuple(MiningSettings.__dataclass_fields__)


@dataclass(frozen=True)
class MiningRun:
    """What the ``mine`` step takes: how the engine runs (:class:`MiningSettings`, the config's
    ``mining`` section) and the pseudopair set's criterion with its parameters, every parameter
    present (its default filled in) and checked by the criteria registry."""

    engine: MiningSettings
    criterion: str = DEFAULT_CRITERION
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", check_params(self.criterion, dict(self.params)))

    @classmethod
    def from_dict(cls, settings: dict) -> "MiningRun":
        """From one flat mapping (:func:`pseudopairs.mining.contract.mining_settings`: the engine's
        keys, ``criterion`` and the criterion's parameters)."""
        if not isinstance(settings, dict):
            raise ValueError(f"mining settings must be a JSON object, got {type(settings).__name__}")
        engine = MiningSettings.from_dict({k: v for k, v in settings.items() if k in ENGINE_KEYS})
        params = {k: v for k, v in settings.items() if k not in ENGINE_KEYS and k != "criterion"}
        return cls(engine, settings.get("criterion", DEFAULT_CRITERION), params)

    def to_dict(self) -> dict[str, Any]:
        """The flat mapping again, every setting present (what ``stats.json`` records)."""
        return {"criterion": self.criterion, **self.params, **self.engine.to_dict()}
