"""`trajforge rollout`: K rollouts of N queries of one app, with a progress bar. Composition only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from evolve.lifecycle import close_round, open_round
from evolve.spine import Spine, open_spine, run_suites
from flows.cli_common import hold_home
from flows.progress_view import shown
from querygen.pipeline import generate_queries, load_history, store_generation
from rollout.android.farm import AndroidFarm
from rollout.loop import open_pool, play
from rollout.policies import NoisyOracle, OracleNoise, Policy, RandomExplorer, VLMPolicy, VLMPolicyConfig
from rollout.records import MODEL_FAULTS
from rollout.runner import RolloutConfig, RolloutReport
from rollout.sim.farm import SimFarm
from rollout.stages import ROLLOUT, rolled
from rollout.suites import Suite, is_suite_ref
from rollout.suites.farm import SuiteFarm
from rollout.suites.queries import environment_queries
from rollout.versions import policy_llm
from rollout.web.env import chromium_available
from rollout.web.farm import WebFarm
from storage.apps import check_apps
from storage.db import transaction
from storage.keys import sha256_hex
from storage.llm_cache import build_gateway
from storage.models import App, Round
from storage.models import Episode as EpisodeRow
from storage.models import Query as QueryRow
from storage.policies import register_policy
from storage.rounds import record
from trajforge.appspec import AppSpec, builtin_app_names, load_app, load_apps
from trajforge.domain import Query
from trajforge.errors import ConfigError, DeviceError, LLMError
from trajforge.families import get_family
from trajforge.gateway import LLMGateway
from trajforge.probe import probe_endpoint
from trajforge.settings import Settings, load_settings

POLICIES = ("noisy-oracle", "random-explorer", "vlm")
BACKENDS = ("sim", "web", "android")


def run_rollout(
    app_ref: str,
    queries: int,
    rollouts_per_query: int,
    policy: str | None,
    backend: str,
    workers: int,
    max_steps: int,
    noise: float,
    config: Path | None,
    serials: list[str] | None = None,
    adb: str = "adb",
    family: str | None = None,
) -> None:
    """Roll out a policy on the device farm; a rerun resumes the unfinished round. The round goes
    through the loop's lifecycle (`evolve.lifecycle`, `rollout.loop.play`): opened, played, closed."""
    suite_task = is_suite_ref(app_ref)  # a suite brings its tasks: the explorer plays them by default
    policy = policy or ("vlm" if family else "random-explorer" if suite_task else "noisy-oracle")
    _check_choices(policy, backend, serials, family, suite_task)
    settings = _load(config, family)
    hold_home(settings)
    suites = run_suites([app_ref]) if suite_task else {}
    spec, apps = _apps(app_ref, settings, backend, suites)
    name = spec.name if spec else next(iter(suites))
    spine = open_spine(settings)
    check_apps(spine.sessions, apps)  # before anything is written
    make_policy, gateway, meta = _policies(policy, spine, noise, max_steps, workers)
    sample = make_policy()
    todo = _queries(spine.sessions, spec, queries, suites)
    with transaction(spine.sessions) as s:
        endpoint = settings.llm.for_group("policy").base_url if policy == "vlm" else None
        policy_id = register_policy(s, sample.name, sample.version, meta=meta, endpoint=endpoint)
        # The same rollout again (app, queries, policy, backend, budget) is the round that holds it:
        # its stored episodes are not redone. Otherwise an unfinished round of this policy resumes.
        same = rollout_hash(name, todo, rollouts_per_query, backend, max_steps, sample)
        rnd = _rollout_round(s, policy_id, same, name)
        number = rnd.number
    farm, workers = _farm(backend, apps, spine, settings, serials, adb, workers, suites)
    pool = open_pool(spine)
    farm.register(pool, workers)
    config_ = RolloutConfig(rollouts_per_query=rollouts_per_query, workers=workers, max_steps=max_steps)
    with shown():  # the runner counts the episodes it plays
        report, _ = play(
            spine,
            farm,
            pool,
            rnd.id,
            policy_id,
            todo,
            make_policy,
            config_,
            backend=backend,
            gateway_to_close=gateway,
        )
    if not report.not_run:  # a round with episodes left unplayed stays open: a rerun resumes it
        record(spine.sessions, number, ROLLOUT.name, rolled(report))  # it has been through rollout
        close_round(spine, number, {})
    kind = f"suite {suites[name].name}" if suites else backend
    _say(number, f"{name}, policy {sample.name} v{sample.version}, {workers} {kind} devices", report)
    _endpoint_failed_all(spine.sessions, rnd.id, number, report)


def _say(number: int, what: str, report: RolloutReport) -> None:
    """The rollout's lines; an incomplete round is an error saying how to heal the farm and resume."""
    typer.echo(f"round {number}: {what}")
    typer.echo(report.render())
    if report.not_run:
        raise DeviceError(
            f"round {number} is incomplete: {report.not_run} episodes found no healthy device; "
            "`trajforge devices list` shows the pool, `trajforge devices reset` returns retired devices, "
            "then rerun the same command"
        )


def _endpoint_failed_all(
    sessions: sessionmaker[Session], round_id: int, number: int, report: RolloutReport
) -> None:
    """A rollout whose every episode the policy's endpoint ended (an HTTP error or a timeout after
    its retries) is an error, not a 0% success rate: one line with the last failure's detail. The
    episodes are kept with their reason, and a rerun plays them again (`rollout.records`)."""
    faulted = sum(report.outcomes[reason] for reason in MODEL_FAULTS)
    if not report.completed or faulted < report.completed:
        return
    with sessions() as s:
        meta = s.scalars(
            select(EpisodeRow.meta)
            .where(EpisodeRow.round_id == round_id, EpisodeRow.reason.in_(MODEL_FAULTS))
            .order_by(EpisodeRow.id.desc())
        ).first()
    failure = (meta or {}).get("policy_failure") or {}
    said = " ".join(str(failure.get("error") or failure.get("reason") or "no detail kept").split())[:300]
    raise LLMError(
        f"round {number}: the policy's endpoint failed every episode ({faulted} of {report.completed}; "
        f"last: {said}); they are stored with their reason and the same command plays "
        "them again: check the model server and llm.policy.base_url, then rerun",
        status=failure.get("status"),
    )


def _load(config: Path | None, family: str | None) -> Settings:
    """The run config, with `--family` (the served checkpoint's model family) over `policy.family`."""
    settings = load_settings(config)
    if family is None:
        return settings
    return settings.model_copy(update={"policy": settings.policy.model_copy(update={"family": family})})


def _apps(
    app_ref: str, settings: Settings, backend: str, suites: dict[str, Suite]
) -> tuple[AppSpec | None, list[AppSpec]]:
    """The app rolled out (None: a suite task), and every app the farm serves (the run's apps with
    this one among them: its launcher must show it); a suite task's farm serves the run's apps beside it."""
    others = load_apps([ref for ref in settings.apps if not is_suite_ref(ref)])
    if suites:
        return None, others
    spec = load_app(app_ref)
    apps = [spec, *(a for a in others if a.name != spec.name)]
    if backend == "android" and spec.name not in android_packages(apps):
        raise ConfigError(
            f"backend 'android' cannot open app {spec.name!r}: its spec has no `package:`; set the "
            "activity to launch (e.g. package: com.example.app/.MainActivity)"
        )
    return spec, apps


def _policies(
    policy: str, spine: Spine, noise: float, max_steps: int, devices: int
) -> tuple[Callable[[], Policy], LLMGateway | None, dict[str, Any]]:
    """A fresh policy per episode, the model gateway it calls (closed after the run) and what
    the policy row records."""
    settings = spine.settings
    llm = policy_llm(settings.llm, devices)
    if policy == "vlm" and llm.for_group("policy").offline:
        raise ConfigError(
            "policy 'vlm' needs an endpoint; set TRAJFORGE_LLM_BASE_URL or llm.policy.base_url "
            "(or use noisy-oracle)"
        )
    if policy == "vlm":
        probe_endpoint(llm.for_group("policy"), "policy")  # before any device is leased
    gateway = build_gateway(llm, spine.sessions, "policy") if policy == "vlm" else None
    oracle_noise = OracleNoise(
        mis_tap=noise, wrong_value=noise, premature_terminate=noise / 2, malformed=noise
    )
    vlm = None
    if policy == "vlm":  # built once: a bad family or format is one error before anything runs
        family = settings.policy.family
        name = f"vlm-{family}" if family else "vlm"  # another family is another policy (and rollout)
        model = llm.for_group("policy").model
        vlm = VLMPolicyConfig.from_settings(settings.policy, name=name, model=model)

    def make_policy() -> Policy:
        if policy == "noisy-oracle":
            return NoisyOracle(oracle_noise)
        if policy == "random-explorer":
            return RandomExplorer(max_actions=max_steps)
        assert gateway is not None and vlm is not None
        return VLMPolicy(vlm, gateway, spine.frames)

    meta = {"noise": oracle_noise.model_dump()} if policy == "noisy-oracle" else {}
    return make_policy, gateway, meta


def _check_choices(
    policy: str, backend: str, serials: list[str] | None, family: str | None = None, suite_task: bool = False
) -> None:
    if policy not in POLICIES:
        raise ConfigError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    if suite_task and policy == "noisy-oracle":
        raise ConfigError(
            "the noisy oracle knows only app specs' graphs; roll a suite task out with --policy "
            "random-explorer or vlm"
        )
    if suite_task and backend != "sim":
        raise ConfigError(f"a suite task runs in its suite's own environment; drop --backend {backend}")
    if family is not None and policy != "vlm":
        raise ConfigError(f"--family names the model family of --policy vlm, not of {policy!r}; drop one")
    if family is not None:
        get_family(family)  # an unknown one is a ConfigError naming the known ones
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    if backend == "android" and not serials:
        raise ConfigError(
            "backend 'android' needs devices: pass --serial SERIAL for each (see `adb devices`)"
        )
    if backend == "web" and not chromium_available():
        raise ConfigError(
            "backend 'web' needs Chromium and Playwright: apt-get install chromium (docs/environments.md)"
        )


def _rollout_round(s: Session, policy_id: int, same: str, app: str) -> Round:
    """The round holding this very rollout, else this policy's unfinished one, else a new round."""
    held = s.scalars(select(Round).where(Round.policy_id == policy_id, Round.config_hash == same)).first()
    if held is not None:
        return held
    running = s.scalars(
        select(Round)
        .where(Round.status == "running", Round.policy_id == policy_id)
        .order_by(Round.number.desc())
    ).first()
    made_by = {"made_by": f"trajforge rollout --app {app}"}  # not a round of the loop
    return running or open_round(s, policy_id, seed=0, config_hash=same, stats=made_by)


def _farm(
    backend: str,
    apps: list[AppSpec],
    spine: Spine,
    settings: Settings,
    serials: list[str] | None,
    adb: str,
    workers: int,
    suites: dict[str, Suite],
) -> tuple[SimFarm | WebFarm | AndroidFarm | SuiteFarm, int]:
    """The devices, and how many episodes run at once on them; each slot plays the suite tasks too."""
    if backend == "android":
        return AndroidFarm(serials or [], android_packages(apps), adb, spine.store), min(
            workers, len(serials or [])
        )
    faults = settings.evolve.faults  # fault drills: the config's switch
    base = (SimFarm if backend == "sim" else WebFarm)(apps, store=spine.store, faults=faults)
    return (SuiteFarm(base, suites) if suites else base), workers


def android_packages(apps: list[AppSpec]) -> dict[str, str]:
    """The activity adb starts per app: the spec's `package`, else the built-in apps' test builds."""
    builtin = set(builtin_app_names())
    return {
        a.name: a.package or f"com.trajforge.{a.name}/.MainActivity"
        for a in apps
        if a.package or a.name in builtin
    }


def rollout_hash(app: str, queries: list[Query], k: int, backend: str, max_steps: int, policy: Policy) -> str:
    """What makes two `trajforge rollout` calls the same rollout."""
    what = {
        "app": app,
        "queries": sorted(q.uid for q in queries),
        "rollouts_per_query": k,
        "backend": backend,
        "max_steps": max_steps,
        "policy": [policy.name, policy.version],
    }
    return sha256_hex(json.dumps(what, sort_keys=True).encode())


def _queries(
    sessions: sessionmaker[Session], spec: AppSpec | None, n: int, suites: dict[str, Suite]
) -> list[Query]:
    """The app's n most recent kept queries, generating and storing the missing ones; a suite task's
    seeds 0..n-1, each worded by its environment (a rerun asks for the same ones)."""
    if spec is None:
        name = next(iter(suites))
        return environment_queries(sessions, suites, {name: list(range(n))})[name]
    with sessions() as s:
        have = s.scalars(
            select(QueryRow)
            .join(App, App.id == QueryRow.app_id)
            .where(App.name == spec.name, QueryRow.status == "kept")
            .order_by(QueryRow.id.desc())
            .limit(n)
        ).all()
        out = [q.to_domain(spec.name) for q in have]
    if len(out) < n:
        coverage, dedup = load_history(sessions, spec.name)
        report = generate_queries(spec, n - len(out), seed=len(out), coverage=coverage, deduper=dedup)
        store_generation(sessions, spec, report)
        out.extend(report.kept)
    return out
