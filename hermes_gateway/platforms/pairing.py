"""DM pairing: an unknown user gets a short code; an operator approves it with
`hermes pairing approve PLATFORM CODE`. Codes live 1 h, at most 3 are pending per platform,
and 5 wrong approvals in a row lock approvals for 15 minutes."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

import structlog
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from hermes_gateway.errors import HermesError
from hermes_gateway.store.models import PairingRow
from hermes_gateway.store.store import Store

log = structlog.get_logger("hermes.pairing")

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud and typed
CODE_LENGTH = 8
CODE_TTL_S = 3600.0
MAX_PENDING = 3
MAX_BAD_TRIES = 5
LOCKOUT_S = 900.0


class PairingError(HermesError):
    """An approval that cannot be done: unknown or expired code, or approvals locked."""


@dataclass(frozen=True, slots=True)
class PairingRequest:
    code: str
    new: bool


@dataclass(frozen=True, slots=True)
class Approved:
    platform: str
    user_id: str
    user_name: str
    chat_id: str


class PairingBook:
    """Pending codes and approved users, persisted in the store; approvals cached in memory."""

    def __init__(self, store: Store, clock: Any = time.time) -> None:
        self.store = store
        self._clock = clock
        self._approved: set[tuple[str, str]] = set()
        self._bad_tries: dict[str, int] = {}
        self._locked_until: dict[str, float] = {}

    async def load(self) -> None:
        async def run(db: AsyncSession) -> list[tuple[str, str]]:
            rows = await db.execute(
                select(PairingRow.platform, PairingRow.user_id).where(
                    PairingRow.status == "approved"
                )
            )
            return [(p, u) for p, u in rows]

        self._approved = set(await self.store.read(run))

    def is_approved(self, platform: str, user_id: str) -> bool:
        return (platform, user_id) in self._approved

    async def request(
        self, platform: str, user_id: str, user_name: str, chat_id: str
    ) -> PairingRequest | None:
        """The user's code (the same one while it is valid); None when too many are pending."""
        now = self._clock()

        async def run(db: AsyncSession) -> PairingRequest | None:
            await db.execute(
                delete(PairingRow).where(
                    PairingRow.status == "pending", PairingRow.created_at < now - CODE_TTL_S
                )
            )
            rows = (
                await db.execute(
                    select(PairingRow).where(
                        PairingRow.platform == platform, PairingRow.status == "pending"
                    )
                )
            ).scalars()
            pending = list(rows)
            mine = next((r for r in pending if r.user_id == user_id), None)
            if mine is not None:
                return PairingRequest(mine.code, new=False)
            if len(pending) >= MAX_PENDING:
                return None
            code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
            db.add(
                PairingRow(
                    platform=platform,
                    user_id=user_id,
                    user_name=user_name,
                    chat_id=chat_id,
                    code=code,
                    status="pending",
                    created_at=now,
                )
            )
            return PairingRequest(code, new=True)

        result: PairingRequest | None = await self.store.write(run)
        if result is not None and result.new:
            log.info("pairing.requested", platform=platform, user_id=user_id, user_name=user_name)
        return result

    async def approve(self, platform: str, code: str) -> Approved:
        now = self._clock()
        if self._locked_until.get(platform, 0) > now:
            raise PairingError(
                f"too many wrong codes for {platform}; approvals are locked for "
                f"{int(self._locked_until[platform] - now)} s"
            )
        wanted = code.strip().upper().replace("-", "").replace(" ", "")

        async def run(db: AsyncSession) -> Approved | None:
            row = (
                await db.execute(
                    select(PairingRow).where(
                        PairingRow.platform == platform,
                        PairingRow.status == "pending",
                        PairingRow.code == wanted,
                        PairingRow.created_at >= now - CODE_TTL_S,
                    )
                )
            ).scalar()
            if row is None:
                return None
            row.status = "approved"
            row.approved_at = now
            row.code = ""
            return Approved(platform, row.user_id, row.user_name, row.chat_id)

        approved: Approved | None = await self.store.write(run)
        if approved is None:
            tries = self._bad_tries.get(platform, 0) + 1
            self._bad_tries[platform] = tries
            if tries >= MAX_BAD_TRIES:
                self._locked_until[platform] = now + LOCKOUT_S
                self._bad_tries[platform] = 0
                log.warning("pairing.locked", platform=platform, seconds=LOCKOUT_S)
            raise PairingError(f"no pending pairing request with code {wanted} on {platform}")
        self._bad_tries[platform] = 0
        self._approved.add((platform, approved.user_id))
        log.info("pairing.approved", platform=platform, user_id=approved.user_id)
        return approved

    async def revoke(self, platform: str, user_id: str) -> bool:
        async def run(db: AsyncSession) -> int:
            res = await db.execute(
                delete(PairingRow).where(
                    PairingRow.platform == platform, PairingRow.user_id == user_id
                )
            )
            return int(res.rowcount or 0)  # type: ignore[attr-defined]

        removed: int = await self.store.write(run)
        self._approved.discard((platform, user_id))
        return removed > 0

    async def entries(self) -> list[dict[str, Any]]:
        now = self._clock()

        async def run(db: AsyncSession) -> list[dict[str, Any]]:
            rows = (await db.execute(select(PairingRow).order_by(PairingRow.id))).scalars()
            return [
                {
                    "platform": r.platform,
                    "user_id": r.user_id,
                    "user_name": r.user_name,
                    "status": r.status,
                    "code": r.code if r.status == "pending" else "",
                    "age_s": round(now - r.created_at),
                }
                for r in rows
                if r.status == "approved" or r.created_at >= now - CODE_TTL_S
            ]

        result: list[dict[str, Any]] = await self.store.read(run)
        return result
