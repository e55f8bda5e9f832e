"""Error-recovery probes on a real device (InfiGUI-R1 §3.2.3): restore, err, escape, check.

For each prone-to-error site (`trajforge.recovery.RecoverySite`) the device is brought back to
the state before the step by replaying the reference's prefix from the task's reset (the task's
own seed: a MiniWoB++ page, a simulated phone and a web app all replay the same way), and the
replayed screen must match the recorded one. An environment that offers snapshots (`snapshot()`
and `restore(snapshot)`, as the simulator does) replays once per site and restores the snapshot
after that. The wrong action is played, then escapes are tried in order, each from a fresh
restore:

- `press back`, the escape the paper names;
- the wrong action again, which undoes a toggle that `back` would leave set.

An escape counts only when the screen it leads to is the screen of the step, and the reference's
remaining actions, played from there, still succeed by the environment's own verifier or reward
(or, where it has none, show the recorded screens): a screen that looks the same over a changed
state (an item added to a cart) is not an escape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rollout.env import Environment
from rollout.pool import DevicePool, Lease, holder_name
from trajforge.actions import Action, ActionKind
from trajforge.domain import Observation, StepView
from trajforge.errors import DeviceError
from trajforge.recovery import Prober, ProbeResult, RecoverySite, same_screen, step_action
from trajforge.world.verify import UNVERIFIABLE

log = logging.getLogger("trajforge.recovery")

BACK = Action(kind=ActionKind.PRESS, key="back")


class _Skip(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def escapes(wrong: Action, count: int) -> list[Action]:
    """The escapes tried after `wrong`, in order, at most `count`."""
    found = [BACK]
    if wrong.kind == ActionKind.CLICK:
        found.append(wrong.model_copy(update={"thought": None, "intent": None}))
    return found[:count]


def probe(env: Environment, site: RecoverySite, max_escapes: int = 2) -> ProbeResult:
    """Try the site's wrong action and its escapes on `env` (see the module docstring)."""
    reason = "escape_not_observed"
    tried = 0
    here = site.steps[site.index]
    restore = _Restorer(env, site)
    try:
        fresh = _check_error(env, site, restore)
        for escape in escapes(site.wrong, max_escapes):
            # the first escape starts from the error state the check left, the others restore again
            start, error = fresh or (restore(), env.step(site.wrong))
            fresh = None
            back = env.step(escape)
            tried += 1
            if not same_screen(back.screenshot, back.elements, here.before, here.elements):
                continue
            if not _finishes(env, site, site.index):
                reason = "off_track_after_escape"
                continue
            return ProbeResult(
                site,
                None,
                StepView.observed(site.wrong, start, error),
                StepView.observed(escape, error, back),
                tried,
            )
    except _Skip as skip:
        reason = skip.reason
    except DeviceError as exc:
        log.warning("recovery probe of %s step %d: %s", site.reference[:12], site.index, exc)
        reason = "device_error"
    return ProbeResult(site, reason, tries=tried)


class _Restorer:
    """Brings `env` back to the state before the site's step: the prefix replayed, checked against
    the recorded screen; then the environment's snapshot of it, where it offers one."""

    def __init__(self, env: Environment, site: RecoverySite) -> None:
        self.env, self.site = env, site
        self._snapshot: object | None = None

    def __call__(self) -> Observation:
        env, site = self.env, self.site
        if self._snapshot is not None:
            return env.restore(self._snapshot)  # type: ignore[attr-defined]
        obs = env.reset(site.query)
        for view in site.steps[: site.index]:
            obs = env.step(step_action(view))
            if obs.done:
                raise _Skip("restore_ended")
        here = site.steps[site.index]
        if not same_screen(obs.screenshot, obs.elements, here.before, here.elements):
            raise _Skip("restore_mismatch")
        if callable(getattr(env, "snapshot", None)):
            self._snapshot = env.snapshot()  # type: ignore[attr-defined]
        return obs


def _check_error(
    env: Environment, site: RecoverySite, restore: _Restorer
) -> tuple[Observation, Observation] | None:
    """Skip a wrong action that is no error, or leaves no error state to escape from. One that
    shows the reference's next screen is an error only if the reference's rest fails after it
    (a state the screen does not show: another destination picked from a list). Returns the
    restored and the error observations while the device still shows that error, else None."""
    start = restore()
    error = env.step(site.wrong)
    if error.done:  # the environment's reward says whether it was wrong
        raise _Skip("not_an_error" if env.verify().success else "error_ends_episode")
    following = site.steps[site.index + 1].elements if site.index + 1 < len(site.steps) else None
    if same_screen(error.screenshot, error.elements, site.steps[site.index].after, following):
        if _finishes(env, site, site.index + 1):
            raise _Skip("not_an_error")
        return None  # the check played on past the error
    if same_screen(error.screenshot, error.elements, start.screenshot, start.elements):
        raise _Skip("error_without_new_screen")
    return start, error


def _finishes(env: Environment, site: RecoverySite, first: int) -> bool:
    """Play the reference's steps from `first` on; True when they still end in success (by the
    environment's verifier or reward, or where it has none, showing the recorded screens)."""
    matched = True
    views = site.steps[first:]
    for i, view in enumerate(views):
        obs = env.step(step_action(view))
        following = views[i + 1].elements if i + 1 < len(views) else None
        matched = matched and same_screen(obs.screenshot, obs.elements, view.after, following)
        if obs.done:
            break
    verdict = env.verify()
    return matched if verdict.failed == UNVERIFIABLE else verdict.success


def device_prober(
    pool: DevicePool, envs: Callable[[Lease], Environment], backend: str | None, max_escapes: int = 2
) -> Prober:
    """Probes on one device leased from `pool` for the call (released after, closed environment)."""

    def run(sites: list[RecoverySite]) -> list[ProbeResult]:
        if not sites:
            return []
        lease = pool.lease(holder_name("recovery"), backend)
        if lease is None:  # counted per site; a rerun of curation probes them
            log.warning("no healthy %s device free: %d recovery probes not played", backend or "", len(sites))
            return [ProbeResult(site, "no_device") for site in sites]
        env = envs(lease)
        results = []
        try:
            for site in sites:
                results.append(probe(env, site, max_escapes))
                if results[-1].reason == "device_error":  # a fresh environment for the next site
                    env.close()
                    env = envs(lease)
            return results
        finally:
            env.close()
            pool.release(lease)

    return run
