"""The store's schema: the numbered SQL files in migrations/, applied at collector start."""

from __future__ import annotations

from importlib import resources

from gpuscope.core.migrations import apply_migrations, numbered_sql_files


def _folder() -> resources.abc.Traversable:
    return resources.files(__package__).joinpath("migrations")


def available() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every migration shipped, in version order."""
    return numbered_sql_files(_folder())


def migrate(dsn: str, up_to: int | None = None) -> list[int]:
    """Bring the store's schema up to date (or to version `up_to`, for upgrade tests)."""
    return apply_migrations(dsn, _folder(), up_to)
