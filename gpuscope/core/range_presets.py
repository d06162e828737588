"""The time ranges a user names in one word, back from now: the UI's `?range=6h`, the read API's
`range=6h` and the CLIs' `--range 6h` (collector/query/range_keys.py parses them with spans). Here, below
everything, so that `gpuscope health` and `gpuscope reports` can name them in their help without the
query layer's database stack, which an exporter's node does not install."""

from __future__ import annotations

PRESETS_S = {"15m": 15 * 60, "1h": 3600, "6h": 6 * 3600, "24h": 24 * 3600, "7d": 7 * 86400}
