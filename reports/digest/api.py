"""Opting users out of the waste emails: PUT and DELETE /api/v1/reports/opt-out/{user} with the admin
token (an administrator acts on a user's request), GET /api/v1/reports/opt-out with the read token. The
configuration's `opt_out` list is shown too; it is changed in the configuration, not here."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path

from gpuscope.collector.api.deps import ReadPoolDep, WritePoolDep, require_admin_token, require_read_token
from gpuscope.collector.api.responses import error

UserPath = Annotated[str, Path(min_length=1, max_length=200, description="the user's name, as the scheduler has it")]


def opt_out_router(configured: frozenset[str] = frozenset()) -> APIRouter:
    router = APIRouter(prefix="/api/v1/reports/opt-out", tags=["reports"])

    @router.get("", dependencies=[Depends(require_read_token)])
    def get_opt_outs(pool: ReadPoolDep) -> list[dict[str, Any]]:
        """The users who get no waste emails: opted out through this API (`source` api, with since when)
        or in the configuration's `opt_out` (source config)."""
        with pool.connection() as conn:
            rows = conn.execute("SELECT username, since FROM report_opt_out ORDER BY username").fetchall()
        listed = [{"user": user, "since": since, "source": "api"} for user, since in rows]
        listed += [{"user": user, "since": None, "source": "config"} for user in sorted(configured)]
        return listed

    @router.put("/{user}", dependencies=[Depends(require_admin_token)])
    async def put_opt_out(pool: WritePoolDep, user: UserPath) -> dict[str, Any]:
        """Opt the user out of the waste emails, from now on (again: keeps the first time)."""
        async with pool.connection() as conn:
            cur = await conn.execute(
                "INSERT INTO report_opt_out (username, since) VALUES (%s, %s)"
                " ON CONFLICT (username) DO UPDATE SET since = report_opt_out.since RETURNING since",
                (user, datetime.now(UTC)),
            )
            row = await cur.fetchone()
        return {"user": user, "since": row[0] if row else None}

    @router.delete(
        "/{user}",
        dependencies=[Depends(require_admin_token)],
        responses={404: error("The user has not opted out"), 409: error("The configuration opts the user out")},
    )
    async def delete_opt_out(pool: WritePoolDep, user: UserPath) -> dict[str, Any]:
        """Let the user get waste emails again."""
        if user in configured:
            raise HTTPException(409, f"the configuration's digest.opt_out lists {user!r}: remove it there")
        async with pool.connection() as conn:
            cur = await conn.execute("DELETE FROM report_opt_out WHERE username = %s", (user,))
            removed = cur.rowcount > 0
        if not removed:
            raise HTTPException(404, f"{user!r} has not opted out")
        return {"user": user, "opted_out": False}

    return router
