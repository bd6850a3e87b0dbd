"""The demo's enrollment story: a full course, its waitlist, a drop that promotes the first
in line, a transfer; every step through the REST API, every result read back from it."""

from __future__ import annotations

import asyncio
from typing import Any

import click
import httpx

from services.api.queries import MAX_WAIT_S


async def story(http: httpx.AsyncClient, run: str, timeout: float) -> bool:
    """True when every step ended as the story says."""
    told = _Story(http, asyncio.get_running_loop().time() + timeout)
    algebra, poetry = f"algebra-{run}", f"poetry-{run}"
    await told.put(f"/courses/{algebra}", {"title": "Algebra", "capacity": 2, "credits": 3})
    await told.put(f"/courses/{poetry}", {"title": "Poetry", "capacity": 2, "credits": 2})
    ana, ben, cy = (f"{name}-{run}" for name in ("ana", "ben", "cy"))
    for student in (ana, ben, cy):
        await told.put(f"/students/{student}", {"name": student, "max_credits": 9})
    click.echo(f"course   {algebra} has 2 seats; {ana}, {ben} and {cy} enroll in it")
    enrolled = [await told.enroll(student, algebra) for student in (ana, ben, cy)]
    ok = [e["status"] for e in enrolled] == ["ENROLLED", "ENROLLED", "WAITLISTED"]
    await told.roster(algebra)

    click.echo(f"drop     {ana} drops {algebra}: the first in line takes the seat")
    dropped = await told.command("DELETE", f"/enrollments/{enrolled[0]['enrollment_id']}")
    promoted = await told.until(enrolled[2]["enrollment_id"], "ENROLLED")
    ok = ok and dropped["status"] == "DROPPED" and promoted["status"] == "ENROLLED"
    await told.roster(algebra)

    click.echo(f"transfer {ben} moves to {poetry}, keeping the old seat until the new one is his")
    path = f"/enrollments/{enrolled[1]['enrollment_id']}/transfer"
    moved = await told.command("POST", path, {"course_id": poetry})
    ok = ok and (moved["status"], moved["course_id"]) == ("ENROLLED", poetry)
    await told.roster(algebra)
    await told.roster(poetry)
    return ok


class _Story:
    def __init__(self, http: httpx.AsyncClient, deadline: float) -> None:
        self.http = http
        self.deadline = deadline

    async def put(self, path: str, body: dict[str, Any]) -> None:
        (await self.http.put(path, json=body)).raise_for_status()

    async def enroll(self, student: str, course: str) -> dict[str, Any]:
        body = {"student_id": student, "course_id": course, "waitlist": True}
        response = await self.http.post("/enrollments", json=body)
        response.raise_for_status()
        accepted = response.json()
        return await self._settled(accepted["enrollment_id"], accepted["consistency_token"])

    async def command(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A drop or a transfer, and the enrollment once that command settled."""
        response = await self.http.request(method, path, json=body)
        response.raise_for_status()
        accepted = response.json()
        return await self._settled(accepted["enrollment_id"], accepted["consistency_token"])

    async def until(self, enrollment_id: str, status: str) -> dict[str, Any]:
        """A change another saga causes (a promotion): read until it shows."""
        body: dict[str, Any] = {}
        while asyncio.get_running_loop().time() < self.deadline:
            response = await self.http.get(f"/enrollments/{enrollment_id}")
            body = response.json() if response.status_code == 200 else {}
            if body.get("status") == status:
                break
            await asyncio.sleep(0.2)
        self._show(body)
        return body

    async def roster(self, course: str) -> None:
        """The course at rest: a release or a promotion may land a moment after the status
        that caused it, so read until no seat is held (a few seconds at most)."""
        r: dict[str, Any] = {}
        for _ in range(25):
            response = await self.http.get(f"/courses/{course}/roster")
            r = response.json() if response.status_code == 200 else {}
            if r.get("held") == 0:
                break
            await asyncio.sleep(0.2)
        if not r:
            click.echo(f"roster   {course}: not projected yet")
            return
        waiting = ", ".join(f"{w['position']}. {w['student_id']}" for w in r["waitlist"])
        click.echo(
            f"roster   {course:32} -> enrolled {r['enrolled']}, held {r['held']}, "
            f"waitlist [{waiting}]"
        )

    async def _settled(self, enrollment_id: str, token: str) -> dict[str, Any]:
        """GET with the command's token and ?wait= until settled (a 504 only means the
        projector is still catching up)."""
        body: dict[str, Any] = {"enrollment_id": enrollment_id, "status": "not projected"}
        loop = asyncio.get_running_loop()
        while (left := self.deadline - loop.time()) > 0:
            params = {"wait": f"{min(left, MAX_WAIT_S):.1f}", "consistency_token": token}
            try:
                response = await self.http.get(f"/enrollments/{enrollment_id}", params=params)
            except httpx.HTTPError:
                await asyncio.sleep(0.5)
                continue
            if response.status_code == 200:
                body = response.json()
                if body["settled"]:
                    break
            else:
                await asyncio.sleep(0.2)
        self._show(body)
        return body

    def _show(self, e: dict[str, Any]) -> None:
        where = f" in {e['course_id']}" if "course_id" in e else ""
        position = f" at position {e['waitlist_position']}" if e.get("waitlist_position") else ""
        reason = f" ({e['reason']})" if e.get("reason") else ""
        who = f"{e.get('student_id', '?')}"
        click.echo(
            f"  enrollment {e.get('enrollment_id', '?')[:12]} {who:14} -> "
            f"{e.get('status')}{where}{position}{reason}"
        )
