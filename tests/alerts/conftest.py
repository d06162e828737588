from __future__ import annotations

import pytest

from gpuscope.alerts import views


@pytest.fixture
def adsn(dsn: str) -> str:
    """A fresh database with the schema and the alert rules' views."""
    views.apply(dsn)
    return dsn
