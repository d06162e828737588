"""One palette for alert severities, shared by chat messages and the dashboard's badges (RGB as integers)."""

from __future__ import annotations

SEVERITY_COLOURS = {"critical": 0xD32F2F, "error": 0xD32F2F, "warning": 0xF9A825, "info": 0x1976D2}
RESOLVED_COLOUR = 0x2E7D32
UNKNOWN_COLOUR = 0x757575
