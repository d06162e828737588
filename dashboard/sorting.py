"""Sortable tables' order in the URL: "key" ascending, "-key" descending, shared by the jobs and reports pages."""

from __future__ import annotations


def next_sort(sort: str, key: str, descending_first: bool) -> str:
    """The order after a click on `key`: the other way round if the table is sorted by it already, else the
    column's natural first way (numbers: largest first)."""
    if sort.lstrip("-") == key:
        return key if sort.startswith("-") else f"-{key}"
    return f"-{key}" if descending_first else key


class SortedView:
    """A view whose `sort` field holds its table's order ("key" or "-key")."""

    sort: str

    @property
    def sort_key(self) -> str:
        return self.sort.lstrip("-")

    @property
    def descending(self) -> bool:
        return self.sort.startswith("-")
