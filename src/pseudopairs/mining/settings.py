"""The config's ``mining`` section: how the mining engine runs (the criterion and its parameters
belong to each pseudopair set; see :mod:`pseudopairs.mining.criteria`)."""

from __future__ import annotations

from dataclasses import dataclass

from pseudopairs.core.settings import Settings, device_setting, setting


@dataclass(frozen=True)
class MiningSettings(Settings):
    """The config's ``mining`` section: how the engine runs (the criterion and its parameters
    belong to each pseudopair set)."""

    SECTION = "mining"

    device: str = device_setting()
    block_size: int | None = setting(None, kind=int, low=1, optional=True,
                                     doc="query rows per score block (null: automatic)")
    encode_batch_size: int = setting(256, kind=int, low=1, doc="captions per encoder batch")
    threads: int = setting(1, kind=int, low=1, doc="CPU threads")
