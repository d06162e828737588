"""Unknown query parameters are refused on every read of /api/v1, naming them and the ones the route
takes: an ignored one would answer something other than what was asked (`?range=6h` once answered the
default hour) and look right.

One dependency for the whole app (collector/main.py), so no route can forget it; it reads what each
route accepts from the route's own parameters, its dependencies' included (the time range's minutes,
range, start and end), so a parameter added to a route is accepted without a list kept by hand.
"""

from __future__ import annotations

from fastapi import HTTPException, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

CHECKED_PREFIX = "/api/v1/"
CHECKED_METHODS = frozenset({"GET", "HEAD"})


async def only_known_parameters(request: Request) -> None:
    route = request.scope.get("route")
    if request.method not in CHECKED_METHODS or not isinstance(route, APIRoute):
        return
    if not route.path.startswith(CHECKED_PREFIX):
        return
    accepted = accepted_parameters(route)
    unknown = sorted({name for name in request.query_params if name not in accepted})
    if not unknown:
        return
    what = "unknown query parameter" + ("s" if len(unknown) > 1 else "")
    takes = f"it takes {', '.join(sorted(accepted))}" if accepted else "it takes none"
    raise HTTPException(422, f"{what} {', '.join(unknown)} for {route.path_format}: {takes}")


def accepted_parameters(route: APIRoute) -> frozenset[str]:
    """The query parameters `route` reads, by the names a URL gives them (aliases: range=). Walked at each
    request: a few objects, and routes are not hashable (Starlette compares them by value)."""
    names: set[str] = set()
    pending: list[Dependant] = [route.dependant]
    while pending:
        dependant = pending.pop()
        names.update(field.alias for field in dependant.query_params)
        pending.extend(dependant.dependencies)
    return frozenset(names)
