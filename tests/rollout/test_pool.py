"""The device pool on SQLite and PostgreSQL: leases, expiry, failures, concurrency."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy.orm import Session, sessionmaker

from rollout.pool import DevicePool
from trajforge.errors import ConfigError


def test_register_lease_release(sessions: sessionmaker[Session]) -> None:
    pool = DevicePool(sessions)
    pool.register("sim-0", "sim", capacity=2)
    pool.register("sim-0", "sim", capacity=2)  # idempotent
    pool.register("phone-1", "android", address="emulator-5554")
    assert pool.free_slots() == 3
    a, b = pool.lease("w1", backend="sim"), pool.lease("w2", backend="sim")
    assert a is not None and b is not None and {a.slot, b.slot} == {0, 1} and a.device == "sim-0"
    assert pool.lease("w3", backend="sim") is None
    phone = pool.lease("w3")
    assert phone is not None and (phone.backend, phone.address) == ("android", "emulator-5554")
    pool.release(a)
    assert pool.free_slots("sim") == 1
    assert pool.heartbeat(b) and not pool.heartbeat(a)  # a was released: its holder lost it


def test_expired_leases_are_reclaimed(sessions: sessionmaker[Session]) -> None:
    pool = DevicePool(sessions, lease_ttl_s=0.2)
    pool.register("sim-0", "sim")
    first = pool.lease("dead-worker")
    assert first is not None and pool.lease("w2") is None
    time.sleep(0.3)  # the first worker died without releasing
    second = pool.lease("w2")
    assert second is not None and second.id == first.id
    assert not pool.heartbeat(first)  # the dead worker cannot take it back


def test_failures_mark_unhealthy_then_retire(sessions: sessionmaker[Session]) -> None:
    pool = DevicePool(sessions, max_failures=2)
    pool.register("sim-0", "sim")
    lease = pool.lease("w")
    assert lease is not None and pool.report_failure(lease) == "unhealthy"
    assert pool.lease("w") is None  # unhealthy devices are not leased
    pool.mark_healthy("sim-0")
    lease = pool.lease("w")
    assert lease is not None and pool.report_failure(lease) == "retired"
    pool.mark_healthy("sim-0")  # a retired device stays retired
    assert pool.lease("w") is None


def test_a_clean_episode_resets_the_failure_run(sessions: sessionmaker[Session]) -> None:
    pool = DevicePool(sessions, max_failures=2)
    pool.register("sim-0", "sim")
    for _ in range(3):  # fail, recover, succeed: never two failures in a row
        lease = pool.lease("w")
        assert lease is not None and pool.report_failure(lease) == "unhealthy"
        pool.mark_healthy("sim-0")
        lease = pool.lease("w")
        assert lease is not None
        pool.release(lease)
    assert pool.lease("w") is not None


def test_concurrent_workers_never_share_a_slot(sessions: sessionmaker[Session]) -> None:
    pool = DevicePool(sessions)
    for i in range(6):
        pool.register(f"sim-{i}", "sim", capacity=2)
    taken: list[tuple[str, int]] = []
    lock = threading.Lock()

    def worker(name: str) -> None:
        while (lease := pool.lease(name)) is not None:
            with lock:
                taken.append((lease.device, lease.slot))

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(taken) == 12 and len(set(taken)) == 12


def test_leases_of_dead_processes_are_reclaimed(sessions: sessionmaker[Session]) -> None:
    import subprocess

    from rollout.pool import holder_name

    pool = DevicePool(sessions, lease_ttl_s=3600)
    pool.register("sim-0", "sim")
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = holder_name("episode").replace(f":{__import__('os').getpid()}:", f":{dead.pid}:")
    assert pool.lease(orphan) is not None and pool.lease("other") is None
    mine = DevicePool(sessions)
    assert mine.reclaim_orphans() == 1
    assert pool.lease(holder_name("next")) is not None
    assert mine.reclaim_orphans() == 0  # a live holder's lease is kept


def test_a_retired_device_is_probed_after_its_cool_down(sessions: sessionmaker[Session]) -> None:
    pool = DevicePool(sessions, max_failures=1, cooldown_s=0.3)
    pool.register("sim-0", "sim", capacity=2)
    lease = pool.lease("w")
    assert lease is not None and pool.report_failure(lease) == "retired"
    assert pool.lease("w") is None  # resting
    time.sleep(0.4)
    probe = pool.lease("w")
    assert probe is not None and pool.devices()[0].health == "probing"
    assert pool.lease("w2") is None  # one probe at a time: its other slot waits for the verdict
    assert pool.report_failure(probe) == "retired"  # the probe failed: retired again, resting again
    assert pool.lease("w") is None
    time.sleep(0.4)
    probe = pool.lease("w")
    assert probe is not None
    pool.release(probe)  # a clean episode: back in service, every slot
    state = pool.devices()[0]
    assert (state.health, state.failures, state.down_since) == ("healthy", 0, None)
    assert pool.lease("a") is not None and pool.lease("b") is not None


def test_reset_returns_devices_and_names_unknown_ones(sessions: sessionmaker[Session]) -> None:
    pool = DevicePool(sessions, max_failures=1, cooldown_s=3600)
    for name in ("sim-0", "sim-1"):
        pool.register(name, "sim")
        lease = pool.lease("w")
        assert lease is not None and pool.report_failure(lease) == "retired"
    with pytest.raises(ConfigError, match="no device named sim-9"):
        pool.reset(["sim-0", "sim-9"])
    assert {d.health for d in pool.devices()} == {"retired"}  # nothing reset half-way
    assert pool.reset(["sim-1"]) == ["sim-1"]
    assert [d.health for d in pool.devices()] == ["retired", "healthy"]
    assert pool.reset() == ["sim-0", "sim-1"] and {d.health for d in pool.devices()} == {"healthy"}
