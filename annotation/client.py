"""The Label Studio connection, and the projects trajforge keeps there.

Every failure to reach Label Studio becomes one `AnnotationError` naming the fix; the
SDK's own exceptions never leak to the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx
from label_studio_sdk import LabelStudio
from label_studio_sdk.core.api_error import ApiError
from sqlalchemy import select
from sqlalchemy.orm import Session

from annotation.config import CONFIG_SHA256, INSTRUCTIONS, LABEL_CONFIG
from storage.models import AnnotationProject
from trajforge.errors import AnnotationError, ConfigError
from trajforge.settings import AnnotationSettings

T = TypeVar("T")
UPLOAD_BATCH = 40  # screenshots per upload request
PREDICTIONS = "trajforge-critics"  # the model_version of the critics' pre-annotations
# What every trajforge project shows: the labelling view and the instructions, opened with each task.
_VIEW: dict[str, Any] = {
    "label_config": LABEL_CONFIG,
    "expert_instruction": INSTRUCTIONS,
    "show_instruction": True,
}


class Studio:
    """A thin, error-translating wrapper over the SDK client (label-studio-sdk 2.x)."""

    def __init__(self, settings: AnnotationSettings, client: LabelStudio | None = None) -> None:
        if settings.api_key is None and client is None:
            raise ConfigError(
                "Label Studio needs an access token: set TRAJFORGE_ANNOTATE_API_KEY (or annotate.api_key "
                "in the config) to the token under Account & Settings in Label Studio"
            )
        self.settings = settings
        self.ls = client or LabelStudio(
            base_url=settings.url.rstrip("/"),
            api_key=settings.api_key.get_secret_value() if settings.api_key else "",
            timeout=settings.timeout_s,
        )
        self._users: dict[int, str] | None = None
        self._files: int | None = None  # the project that holds uploaded screenshots

    def call(self, what: str, fn: Callable[[], T]) -> T:
        url = self.settings.url
        try:
            return fn()
        except httpx.TransportError as exc:
            raise AnnotationError(
                f"Label Studio is not reachable at {url} ({type(exc).__name__}) while trying to {what}: "
                "start it (`docker compose up -d label-studio`) or point TRAJFORGE_ANNOTATE_URL at it"
            ) from exc
        except ApiError as exc:
            if exc.status_code in (401, 403):
                raise AnnotationError(
                    f"Label Studio at {url} refused the access token (HTTP {exc.status_code}) while "
                    f"trying to {what}: copy the token from Account & Settings into "
                    "TRAJFORGE_ANNOTATE_API_KEY (legacy tokens need "
                    "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN=true on the server)"
                ) from exc
            raise AnnotationError(
                f"Label Studio at {url} answered HTTP {exc.status_code} while trying to {what}: {exc.body}"
            ) from exc

    def check(self) -> str:
        """The user the token belongs to; raises AnnotationError when Label Studio cannot be used."""
        me = self.call("identify the token's user", self.ls.users.whoami)
        return str(me.email or me.username or me.id)

    def annotator(self, user: Any) -> str:
        """An annotation's `completed_by` (a user id, or an object) as an e-mail address."""
        if isinstance(user, dict):
            return str(user.get("email") or user.get("id"))
        if self._users is None:
            users = self.call("list users", self.ls.users.list)
            self._users = {u.id: str(u.email or u.username or u.id) for u in users if u.id is not None}
        return self._users.get(int(user), f"user:{user}") if user is not None else "unknown"

    def tasks(self, project_id: int) -> Iterator[Any]:
        """Every task of a project, with its annotations (the SDK pages through them)."""
        pager: Any = self.call("list tasks", lambda: self.ls.tasks.list(project=project_id, fields="all"))
        yield from self.call("page through tasks", lambda: list(pager))

    def upload(self, files: list[tuple[str, bytes]]) -> dict[str, str]:
        """Upload screenshots (unique name, JPEG) as files, not tasks; the URL of each by name.

        Label Studio takes a bare file only into a project whose view has one data key, so the
        files go to a task-less project of their own (`<prefix> · screenshots`), which every
        annotator of the organisation can read. One request carries up to UPLOAD_BATCH files,
        and one more finds where Label Studio put them."""
        http = self.ls._client_wrapper.httpx_client  # the SDK has no call for a bare upload
        project_id = self._files_project()

        def send(part: list[tuple[str, bytes]]) -> dict[str, str]:
            answer = _ok(
                http.request(
                    f"api/projects/{project_id}/import",
                    method="POST",
                    params={"commit_to_project": "false"},
                    # distinct field names: Label Studio reads one file per field
                    files={f"file{i}": (name, data, "image/jpeg") for i, (name, data) in enumerate(part)},
                )
            )
            ids = answer.json().get("file_upload_ids") or []
            listed = _ok(
                http.request(
                    f"api/projects/{project_id}/file-uploads", method="GET", params={"ids": json.dumps(ids)}
                )
            )
            stored = [str(row["file"]).lstrip("/") for row in listed.json()]  # upload/<project>/<uuid>-<name>
            urls = {}
            for name, _ in part:
                found = next((f for f in stored if f.endswith(f"-{name}")), None)
                if found is None:
                    raise AnnotationError(
                        f"Label Studio did not keep the uploaded screenshot {name}; rerun "
                        "`trajforge annotate push` (nothing was recorded for these tasks)"
                    )
                urls[name] = f"/data/{found}"
            return urls

        out: dict[str, str] = {}
        for start in range(0, len(files), UPLOAD_BATCH):
            part = files[start : start + UPLOAD_BATCH]
            out.update(self.call("upload screenshots", lambda part=part: send(part)))  # type: ignore[misc]
        return out

    def _files_project(self) -> int:
        if self._files is None:
            title = f"{self.settings.project_prefix} · screenshots"
            listed: list[Any] = self.call("list projects", lambda: list(self.ls.projects.list(title=title)))
            found = [int(p.id) for p in listed if p.title == title]
            if found:
                self._files = found[0]
            else:
                created = self.call(
                    "create the screenshots project",
                    lambda: self.ls.projects.create(
                        title=title,
                        description="Screenshots of the trajforge review tasks; it holds files, no tasks.",
                        label_config='<View><Image name="image" value="$image"/></View>',
                    ),
                )
                self._files = int(created.id or 0)
        return self._files

    def project_exists(self, project_id: int) -> bool:
        def get() -> bool:
            try:
                self.ls.projects.get(id=project_id)
            except ApiError as exc:
                if exc.status_code == 404:
                    return False
                raise
            return True

        return self.call("look up a project", get)

    def ensure_project(self, s: Session, key: str, title: str) -> AnnotationProject:
        """The project for `key`, created once; its labelling config kept current.

        Idempotent: a project recorded here is reused; one created by a run that crashed
        before recording it is found again by its title.
        """
        row = s.scalar(select(AnnotationProject).where(AnnotationProject.key == key))
        if row is not None and self.project_exists(row.ls_project_id):
            if row.config_sha256 != CONFIG_SHA256:
                recorded = row.ls_project_id
                self.call(
                    "update the labelling config",
                    lambda: self.ls.projects.update(id=recorded, **_VIEW),
                )
                row.config_sha256 = CONFIG_SHA256
            return row
        listed: list[Any] = self.call("list projects", lambda: list(self.ls.projects.list(title=title)))
        found = [p for p in listed if p.title == title]
        if found:
            project_id = int(found[0].id)
            self.call(
                "update the labelling config",
                lambda: self.ls.projects.update(id=project_id, model_version=PREDICTIONS, **_VIEW),
            )
        else:
            created = self.call(
                "create a project",
                lambda: self.ls.projects.create(
                    title=title,
                    description="Trajectories the trajforge critics disagree on or are unsure about, plus an "
                    "audit sample. Set the verdict, label the steps, correct what is wrong.",
                    model_version=PREDICTIONS,
                    show_collab_predictions=True,
                    **_VIEW,
                ),
            )
            project_id = int(created.id or 0)
        if row is None:
            row = AnnotationProject(
                key=key, ls_project_id=project_id, title=title, config_sha256=CONFIG_SHA256
            )
            s.add(row)
        else:  # the recorded project was deleted in Label Studio: its successor takes the key
            row.ls_project_id, row.title, row.config_sha256 = project_id, title, CONFIG_SHA256
        s.flush()
        return row


def _ok(answer: httpx.Response) -> httpx.Response:
    if answer.status_code >= 400:
        raise ApiError(status_code=answer.status_code, headers=dict(answer.headers), body=answer.text)
    return answer


def project_key(settings: AnnotationSettings, app: str, audit: bool = False) -> tuple[str, str]:
    """(key, title) of the project a trajectory of `app` goes to; the audit of what the critics
    published has its own, apart from the queue that teaches."""
    name = app if settings.project_by == "app" else settings.purpose
    if audit:
        return f"audit:{name}", f"{settings.project_prefix} · audit · {name}"
    return f"{settings.project_by}:{name}", f"{settings.project_prefix} · {name}"
