"""spectune-native: the config itself (``spectune generate --config FILE`` runs it); it expresses everything."""
from __future__ import annotations

from spectune.config import DecodeConfig
from spectune.artifacts._render import Rendered


def render(cfg: DecodeConfig) -> Rendered:
    return Rendered("json", cfg.to_dict(), {"shell": "spectune generate --config spectune-config.json --prompt ..."})
