"""The device pool: environments registered in the database and leased to rollouts.

Each device has `capacity` lease slots. A lease has a holder, a heartbeat and an expiry;
an expired lease (its worker died) is free again. On PostgreSQL a lease is taken with
`SELECT … FOR UPDATE SKIP LOCKED`, so many workers on many machines never take the same
slot; on SQLite a process-wide lock keeps it correct for one process. Times are naive UTC
from the caller's clock.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from storage.db import insert_ignore, transaction
from storage.models import Device, DeviceLease
from trajforge.errors import ConfigError
from trajforge.procs import pid_alive

_SQLITE_LOCK = threading.Lock()


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def holder_name(task: str) -> str:
    """`host:pid:task`, so a process can tell which leases belong to dead processes on its host."""
    return f"{socket.gethostname()}:{os.getpid()}:{task}"


@dataclass
class DeviceState:
    """One device as an operator sees it."""

    name: str
    backend: str
    address: str
    health: str
    failures: int
    down_since: datetime | None
    capacity: int
    holders: list[str] = field(default_factory=list)  # live leases


@dataclass(frozen=True)
class Lease:
    id: int
    device: str
    backend: str
    address: str
    slot: int
    holder: str

    @property
    def key(self) -> str:
        return f"{self.device}#{self.slot}"


class DevicePool:
    """Leases device slots to workers.

    A device that is down (retired, or left unhealthy by a worker that died) is probed once it
    has been down for `cooldown_s`: its next lease puts it on trial ("probing", one episode at a
    time). A clean episode returns it to healthy; another failure retires it again.

    Args:
        lease_ttl_s: a lease not renewed for this long is free again.
        max_failures: a device that failed this many times in a row is retired.
        cooldown_s: how long a retired device rests before it is probed.
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        lease_ttl_s: float = 60.0,
        max_failures: int = 3,
        cooldown_s: float = 20.0,
    ) -> None:
        self.sessions = sessions
        self.ttl = timedelta(seconds=lease_ttl_s)
        self.max_failures = max_failures
        self.cooldown = timedelta(seconds=cooldown_s)
        bind = sessions.kw.get("bind")
        self._local_lock = _SQLITE_LOCK if bind is None or bind.dialect.name == "sqlite" else None

    def register(self, name: str, backend: str, address: str = "", capacity: int = 1) -> None:
        """Add a device (idempotent: registering it again changes nothing)."""
        with transaction(self.sessions) as s:
            insert_ignore(
                s,
                Device,
                [
                    {
                        "name": name,
                        "backend": backend,
                        "address": address,
                        "capacity": capacity,
                        "health": "healthy",
                        "failures": 0,
                        "meta": {},
                    }
                ],
                ["name"],
            )
            device_id = s.scalars(select(Device.id).where(Device.name == name)).one()
            insert_ignore(
                s,
                DeviceLease,
                [{"device_id": device_id, "slot": i} for i in range(capacity)],
                ["device_id", "slot"],
            )

    def lease(self, holder: str, backend: str | None = None) -> Lease | None:
        """A free slot of a healthy device, or None when every slot is taken."""
        if self._local_lock is not None:
            with self._local_lock:
                return self._lease(holder, backend)
        return self._lease(holder, backend)

    def _lease(self, holder: str, backend: str | None) -> Lease | None:
        now = utcnow()
        with transaction(self.sessions) as s:
            rested = or_(Device.down_since.is_(None), Device.down_since < now - self.cooldown)
            stmt = (
                select(DeviceLease, Device)
                .join(Device, Device.id == DeviceLease.device_id)
                .where(
                    or_(Device.health == "healthy", rested),
                    or_(DeviceLease.holder.is_(None), DeviceLease.expires < now),
                )
                .order_by(Device.health != "healthy", DeviceLease.id)  # healthy devices first
                .limit(1)
                .with_for_update(skip_locked=True, of=DeviceLease)
            )
            if backend is not None:
                stmt = stmt.where(Device.backend == backend)
            row = s.execute(stmt).first()
            if row is None:
                return None
            lease, device = row
            if device.health != "healthy":  # a probe: the rest of its slots wait for the verdict
                device.health, device.down_since = "probing", now
            lease.holder, lease.heartbeat, lease.expires = holder, now, now + self.ttl
            return Lease(lease.id, device.name, device.backend, device.address, lease.slot, holder)

    def heartbeat(self, lease: Lease) -> bool:
        """Extend the lease; False when it was lost (expired and taken by someone else)."""
        now = utcnow()
        with transaction(self.sessions) as s:
            result = s.execute(
                update(DeviceLease)
                .where(DeviceLease.id == lease.id, DeviceLease.holder == lease.holder)
                .values(heartbeat=now, expires=now + self.ttl)
            )
            return bool(result.rowcount)  # type: ignore[attr-defined]

    def release(self, lease: Lease) -> None:
        """Free the slot after a clean episode; the device's run of failures starts over."""
        with transaction(self.sessions) as s:
            s.execute(
                update(DeviceLease)
                .where(DeviceLease.id == lease.id, DeviceLease.holder == lease.holder)
                .values(holder=None, expires=None)
            )
            s.execute(
                update(Device)
                .where(Device.name == lease.device, or_(Device.failures > 0, Device.health != "healthy"))
                .values(failures=0, health="healthy", down_since=None)
            )

    def report_failure(self, lease: Lease) -> str:
        """The device crashed or hung: release its slot, count the failure.

        Returns:
            "unhealthy" (restart it, then `mark_healthy`) or "retired" after `max_failures`.
        """
        with transaction(self.sessions) as s:
            device = s.scalars(select(Device).where(Device.name == lease.device).with_for_update()).one()
            device.failures += 1
            device.health = "retired" if device.failures >= self.max_failures else "unhealthy"
            device.down_since = utcnow()
            s.execute(update(DeviceLease).where(DeviceLease.id == lease.id).values(holder=None, expires=None))
            return device.health

    def mark_healthy(self, name: str) -> None:
        """After a successful restart."""
        with transaction(self.sessions) as s:
            s.execute(
                update(Device)
                .where(Device.name == name, Device.health == "unhealthy")
                .values(health="healthy", down_since=None)
            )

    def reset(self, names: list[str] | None = None) -> list[str]:
        """Return devices to service by hand (all when `names` is None): healthy, no failures.

        Raises:
            ConfigError: a name is not a registered device.
        """
        with transaction(self.sessions) as s:
            known = set(s.scalars(select(Device.name)))
            unknown = sorted(set(names or []) - known)
            if unknown:
                raise ConfigError(
                    f"no device named {', '.join(unknown)}; `trajforge devices list` shows the pool"
                )
            chosen = sorted(known if names is None else set(names))
            s.execute(
                update(Device)
                .where(Device.name.in_(chosen))
                .values(health="healthy", failures=0, down_since=None)
            )
        return chosen

    def devices(self) -> list[DeviceState]:
        """Every device with its health and leases (`trajforge devices list`, `trajforge status`)."""
        now = utcnow()
        with self.sessions() as s:
            rows = s.execute(
                select(Device, DeviceLease)
                .join(DeviceLease, DeviceLease.device_id == Device.id)
                .order_by(Device.name, DeviceLease.slot)
            ).all()
        states: dict[str, DeviceState] = {}
        for device, lease in rows:
            state = states.setdefault(
                device.name,
                DeviceState(
                    device.name,
                    device.backend,
                    device.address,
                    device.health,
                    device.failures,
                    device.down_since,
                    device.capacity,
                ),
            )
            if lease.holder is not None and lease.expires is not None and lease.expires >= now:
                state.holders.append(lease.holder)
        return list(states.values())

    def reclaim_orphans(self) -> int:
        """Free the leases that dead processes on this host still hold (no need to wait for expiry).

        Returns:
            How many leases were freed.
        """
        prefix = f"{socket.gethostname()}:"
        freed = 0
        with transaction(self.sessions) as s:
            for lease in s.scalars(select(DeviceLease).where(DeviceLease.holder.like(f"{prefix}%"))):
                parts = (lease.holder or "").split(":")
                if len(parts) >= 2 and parts[1].isdigit() and not pid_alive(int(parts[1])):
                    lease.holder, lease.expires = None, None
                    freed += 1
        return freed

    def free_slots(self, backend: str | None = None) -> int:
        now = utcnow()
        with self.sessions() as s:
            stmt = (
                select(DeviceLease.id)
                .join(Device, Device.id == DeviceLease.device_id)
                .where(
                    Device.health == "healthy",
                    or_(
                        DeviceLease.holder.is_(None),
                        and_(DeviceLease.expires.is_not(None), DeviceLease.expires < now),
                    ),
                )
            )
            if backend is not None:
                stmt = stmt.where(Device.backend == backend)
            return len(s.scalars(stmt).all())
