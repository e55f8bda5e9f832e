"""The episode runner: K rollouts per query over the device pool, resumable, never losing an episode.

Every episode has a stable uid (round, query, rollout index). It is written, with its
steps and verifier anchor, in one transaction when it ends, so a crash loses only the
episodes in flight and a rerun skips every episode already stored. A device that crashes,
hangs or times out is reported to the pool (restarted or retired), the failed attempt is
recorded with its reason, and the episode starts again on another device.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from rollout.env import Environment
from rollout.play import Play
from rollout.policies.base import Policy, observed
from rollout.pool import DevicePool, Lease, holder_name
from rollout.records import forget_model_faults
from storage.episodes import record_attempts, store_episode
from storage.models import Query as QueryRow
from trajforge.actions import ActionKind, get_codec
from trajforge.domain import Observation, Query
from trajforge.episode import Attempt, Episode
from trajforge.errors import DeviceCrashed, DeviceError, DeviceHung, LLMError, ParseError
from trajforge.logs import counts
from trajforge.progress import track
from trajforge.stopping import check_stop

T = TypeVar("T")


class RolloutConfig(BaseModel):
    rollouts_per_query: int = Field(1, ge=1, le=64, description="K rollouts per query (group statistics).")
    first_rollout: int = Field(
        0,
        ge=0,
        description="Number of the first rollout: another policy's episodes of the same queries "
        "(guided demonstrations) take numbers after the policy's own.",
    )
    max_steps: int = Field(30, ge=1, le=500, description="Steps before an episode ends as running out.")
    step_timeout_s: float = Field(
        60.0, gt=0, description="A device step or policy call slower than this fails."
    )
    episode_timeout_s: float = Field(900.0, gt=0, description="An episode slower than this fails.")
    workers: int = Field(1, ge=1, le=256, description="Episodes in flight at once (bounded by free devices).")
    max_attempts: int = Field(4, ge=1, le=20, description="Tries of one episode across devices.")
    on_parse_error: Literal["continue", "end"] = Field(
        "continue", description="continue: record the step with its reason and go on; end: end the episode."
    )
    lease_wait_s: float = Field(30.0, gt=0, description="How long to wait for a free device.")
    io_threads: int = Field(
        0,
        ge=0,
        le=4096,
        description="Threads for device calls and database writes; 0: sized to the farm (workers + 4), "
        "so a device call that blocks (adb, a cloud emulator's API) never waits for a thread.",
    )


@dataclass
class RolloutReport:
    requested: int = 0
    completed: int = 0
    skipped: int = 0  # stored by an earlier run: not redone
    not_run: int = 0  # no device came free in time; a rerun picks them up
    successes: int = 0
    steps: int = 0
    retries: int = 0
    seconds: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)  # failure reasons of completed episodes
    attempt_failures: Counter[str] = field(default_factory=Counter)  # device failures that were retried

    def render(self) -> str:
        done = self.completed + self.skipped
        rate = self.successes / max(self.completed, 1)
        secs = max(self.seconds, 1e-9)
        lines = [
            f"episodes: {done}/{self.requested} accounted for "
            f"({self.completed} run now, {self.skipped} already stored)",
            f"success rate: {self.successes}/{self.completed} = {rate:.0%}",
            *([f"not run (no free device; rerun to resume): {self.not_run}"] if self.not_run else []),
            "failures: " + (counts(self.outcomes)),
            "device failures retried: " + (counts(self.attempt_failures)),
            f"steps: {self.steps} in {self.seconds:.1f}s = {self.steps / secs:.1f} steps/s, "
            f"{60 * self.completed / secs:.0f} episodes/min",
        ]
        return "\n".join(lines)


class _Retry(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def episode_uid(round_id: int, query_uid: str, rollout: int) -> str:
    return hashlib.sha256(f"{round_id}:{query_uid}:{rollout}".encode()).hexdigest()


class EpisodeRunner:
    """Args:
    envs: builds (or rebuilds, after a crash) the environment for a leased device slot.
    policies: a fresh policy per episode (policies keep per-episode state).
    guidance: optional query-specific guidance by query uid (GUI-Owl §6.4).
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        pool: DevicePool,
        envs: Callable[[Lease], Environment],
        policies: Callable[[], Policy],
        config: RolloutConfig | None = None,
        guidance: dict[str, str] | None = None,
        backend: str | None = None,
    ) -> None:
        self.sessions, self.pool, self.envs, self.policies = sessions, pool, envs, policies
        self.config = config or RolloutConfig()
        self.guidance = guidance or {}
        self.backend = backend  # lease only devices of this backend (None: any)
        self._envs: dict[str, Environment] = {}
        self._closed: list[Environment] = []  # kept for their statistics
        self._held: dict[int, Lease] = {}  # the slots this runner holds, by lease id
        self._taking: set[futures.Future[Lease | None]] = set()  # leases being asked for
        self._executor: ThreadPoolExecutor  # each run's, sized to the farm (`_all`)
        self._freed: asyncio.Event  # set when this runner frees a slot

    async def run(self, queries: list[Query], round_id: int, policy_id: int) -> RolloutReport:
        report = RolloutReport(requested=len(queries) * self.config.rollouts_per_query)
        started = time.monotonic()
        first = self.config.first_rollout
        todo = [(q, k) for q in queries for k in range(first, first + self.config.rollouts_per_query)]
        mine = {episode_uid(round_id, q.uid, k) for q, k in todo}
        stored = forget_model_faults(self.sessions, round_id, mine)
        with self.sessions() as s:
            query_ids: dict[str, int] = dict(
                s.execute(select(QueryRow.uid, QueryRow.id).where(QueryRow.uid.in_([q.uid for q in queries])))
                .tuples()
                .all()
            )
        pending = [(q, k) for q, k in todo if episode_uid(round_id, q.uid, k) not in stored]
        report.skipped = len(todo) - len(pending)

        async def one(query: Query, k: int) -> None:
            await self._episode(query, k, round_id, policy_id, query_ids[query.uid], report)

        await self._all([partial(one, q, k) for q, k in pending], "rollouts")
        report.seconds = time.monotonic() - started
        return report

    async def evaluate(self, queries: list[Query], label: str) -> list[tuple[Query, int, str]]:
        """Roll the policy out on `queries` without storing anything: (query, rollout, outcome) per
        episode, outcome `success`, `failure`, `unknown` (no verifier) or `not_run` (no device).

        Held-out evaluation: `label` seeds the episodes, so every policy evaluated under one label
        meets the same seeds. Device faults are retried as in `run`.
        """
        report = RolloutReport(requested=len(queries) * self.config.rollouts_per_query)

        async def one(query: Query, k: int) -> tuple[Query, int, str]:
            episode, _ = await self._attempts(query, k, f"{label}:{query.uid}:{k}", report)
            return query, k, episode.outcome if episode else "not_run"

        rollouts = range(self.config.rollouts_per_query)
        return await self._all([partial(one, q, k) for q in queries for k in rollouts], "held-out episodes")

    async def _all(self, jobs: list[Callable[[], Awaitable[T]]], label: str) -> list[T]:
        """Run `jobs`, at most `workers` at once, counted as `label`; after a failure, the others
        stop before the environments close."""
        threads = self.config.io_threads or self.config.workers + 4
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="trajforge-io")
        self._freed = asyncio.Event()
        await self._io(self.pool.reclaim_orphans)  # a killed earlier run leaves leases behind
        gate = asyncio.Semaphore(self.config.workers)

        async def bounded(job: Callable[[], Awaitable[T]], advance: Callable[[], None]) -> T:
            async with gate:
                done = await job()
            advance()
            return done

        with track(label, len(jobs)) as advance:
            tasks = [asyncio.ensure_future(bounded(job, advance)) for job in jobs]
            try:
                return list(await asyncio.gather(*tasks))
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                futures.wait(self._taking)  # a lease asked for by a coroutine cancelled meanwhile lands
                for lease in list(self._held.values()):  # an error or a stop ended the run: no slot is kept
                    self._give_back(lease)
                for env in list(self._envs.values()):
                    await self._io(env.close)
                self._closed.extend(self._envs.values())
                self._envs.clear()
                self._executor.shutdown(wait=False)

    async def _lease(self, holder: str) -> Lease:
        """A free slot; while none is, wait for this runner to free one (an event, not a poll),
        asking the database again at most every second for slots other processes free."""
        deadline = time.monotonic() + self.config.lease_wait_s
        pause = 0.05
        while (lease := await self._taken(holder)) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeviceError(f"no healthy device free within {self.config.lease_wait_s}s")
            self._freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._freed.wait(), min(pause, left))
            pause = min(pause * 2, 1.0)
        return lease

    async def _taken(self, holder: str) -> Lease | None:
        asked = self._executor.submit(self._take, holder)
        self._taking.add(asked)
        asked.add_done_callback(self._taking.discard)
        return await asyncio.wrap_future(asked)

    def _take(self, holder: str) -> Lease | None:
        """A slot, recorded as this runner's the moment it is taken (in the thread: a lease taken
        for a coroutine cancelled meanwhile is still given back when the run ends)."""
        lease = self.pool.lease(holder, self.backend)
        if lease is not None:
            self._held[lease.id] = lease
        return lease

    def _give_back(self, lease: Lease) -> None:
        # released, then forgotten: a run that ends while a thread is here still sees the slot as
        # held and releases it again (a release is keyed by the lease's holder, so twice is once)
        self.pool.release(lease)
        self._held.pop(lease.id, None)

    def _io(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """`fn(*args)` on the runner's own threads (sized to the farm, not to the CPU)."""
        return asyncio.get_running_loop().run_in_executor(self._executor, partial(fn, *args))

    async def _episode(
        self, query: Query, k: int, round_id: int, policy_id: int, query_id: int, report: RolloutReport
    ) -> None:
        uid = episode_uid(round_id, query.uid, k)
        episode, failures = await self._attempts(query, k, uid, report)
        if episode is None:
            report.not_run += 1  # left for the next run, which resumes it: not the episode's failure
            await self._io(record_attempts, self.sessions, round_id, uid, failures)
        elif await self._io(store_episode, self.sessions, round_id, policy_id, query_id, episode):
            self._count(episode, report)

    async def _attempts(
        self, query: Query, k: int, uid: str, report: RolloutReport
    ) -> tuple[Episode | None, list[Attempt]]:
        """Play one episode, on another device after a device fault: (the episode, its failed
        attempts); None when no device was free. Out of attempts, it is a failure."""
        failures: list[Attempt] = []
        for attempt in range(self.config.max_attempts):
            try:
                lease = await self._lease(holder_name(uid[:16]))
            except DeviceError:
                return None, failures
            try:
                played = await asyncio.wait_for(
                    self._play(query, k, uid, lease), self.config.episode_timeout_s
                )
            except (_Retry, TimeoutError) as exc:
                reason = exc.reason if isinstance(exc, _Retry) else "episode_timeout"
                report.retries += 1
                report.attempt_failures[reason] += 1
                failures.append(Attempt(attempt=attempt, device=lease.key, reason=reason))
                await self._recover(lease)
                continue
            await self._io(self._give_back, lease)
            self._freed.set()
            return played.model_copy(update={"device": lease.key, "failures": tuple(failures)}), failures
        return Episode.exhausted(uid, k, failures), failures

    async def _recover(self, lease: Lease) -> None:
        """Report the device, rebuild its environment, and put it back unless retired."""
        self._held.pop(lease.id, None)
        health = await self._io(self.pool.report_failure, lease)
        self._freed.set()
        old = self._envs.pop(lease.key, None)
        if old is not None:
            await self._io(old.close)
            self._closed.append(old)
        if health != "retired":
            await self._io(self.pool.mark_healthy, lease.device)

    def environments(self) -> list[Environment]:
        """Every environment this runner built, open or closed (for their statistics)."""
        return [*self._envs.values(), *self._closed]

    def _env(self, lease: Lease) -> Environment:
        if lease.key not in self._envs:
            self._envs[lease.key] = self.envs(lease)
        return self._envs[lease.key]

    async def _play(self, query: Query, k: int, uid: str, lease: Lease) -> Episode:
        env = await self._io(self._env, lease)  # building one may launch a browser: not on the loop
        policy = self.policies()
        beat = time.monotonic()
        policy.start(query, seed=uid, guidance=self.guidance.get(query.uid), rollout=k)
        obs = await self._device(env.reset, query)
        play = Play()
        limit = getattr(env, "max_steps", None) or self.config.max_steps  # a suite's own (desktop) wins
        for index in range(limit):
            check_stop()  # a stop ends the episode unstored; the rerun plays it again
            obs = await self._step(policy, env, obs, index, play)
            if time.monotonic() - beat > self.pool.ttl.total_seconds() / 4:  # not a write per step
                beat = time.monotonic()
                await self._io(self.pool.heartbeat, lease)
            if play.over:
                break
        else:
            play.reason = "max_steps"
        return play.episode(uid, k, await self._io(env.verify))

    async def _step(
        self, policy: Policy, env: Environment, obs: Observation, index: int, play: Play
    ) -> Observation:
        """One policy call and its action on the device, recorded in `play`: the screen it left."""
        cfg = self.config
        t0 = time.monotonic()
        try:
            out = await asyncio.wait_for(policy.act(obs), cfg.step_timeout_s)
        except LLMError as exc:
            play.fault("policy_error", {"step": index, **exc.detail()})
            return obs
        except TimeoutError:
            play.fault(
                "policy_timeout", {"step": index, "reason": "policy_timeout", "timeout_s": cfg.step_timeout_s}
            )
            return obs
        play.sampling = play.sampling or out.sampling
        action, error = None, None
        try:
            action = get_codec(out.format).parse(out.text, out.screen or observed(obs))
        except ParseError as exc:
            error = exc.reason
        after = await self._device(env.step, action) if action is not None else obs
        play.record(index, obs, after, out.text, action, error, int((time.monotonic() - t0) * 1000))
        if error is not None and cfg.on_parse_error == "end":
            play.reason, play.over = f"unparseable_output:{error}", True
        elif action is not None and action.kind == ActionKind.TERMINATE:
            play.status, play.over = action.status, True
        elif action is not None and action.kind == ActionKind.ANSWER and _answer_ends(out.format):
            play.status, play.over = "success", True  # UI-TARS' finished(content=…): answered and done
        elif after.done:  # the environment ended the episode (MiniWoB++'s WOB_DONE_GLOBAL)
            play.ended_by_env = play.over = True
        return after

    async def _device(self, fn: Callable[..., Any], arg: Any) -> Any:
        """A device call in a thread, bounded by the step timeout; failures become retries."""
        try:
            return await asyncio.wait_for(self._io(fn, arg), self.config.step_timeout_s)
        except DeviceCrashed as exc:
            raise _Retry("device_crashed") from exc
        except DeviceHung as exc:
            raise _Retry("device_hung") from exc
        except TimeoutError as exc:
            raise _Retry("step_timeout") from exc

    def _count(self, episode: Episode, report: RolloutReport) -> None:
        """Count an episode this worker stored (one another worker stored first is not counted)."""
        report.completed += 1
        report.successes += episode.outcome == "success"
        report.steps += len(episode.steps)
        if episode.reason:
            report.outcomes[episode.reason.split(":")[0]] += 1


def _answer_ends(action_format: str) -> bool:
    """Whether the format's answer also ends the episode (UI-TARS' `finished(content=…)`); elsewhere an
    answer is followed by its own terminate, as in AndroidWorld's answer-then-status."""
    return bool(getattr(get_codec(action_format), "final_answer", False))
