"""A desktop suite file as data: the display, the home template, the tasks and the episode's rules
(docs/environments.md#desktops). `rollout.suites.desktop.DesktopSuite` runs it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rollout.suites.base import read_suite_file
from rollout.suites.desktop import display
from rollout.suites.desktop.tasks import DesktopTask
from trajforge.errors import ConfigError

BUILTIN = Path(__file__).with_name("builtin.yaml")
APP_PACKAGES = {"ssconvert": "gnumeric"}  # a command whose Debian package has another name


class SuiteSpec(BaseModel):
    """A suite of desktop tasks: the display's size, a home template and the tasks."""

    model_config = ConfigDict(extra="forbid")

    device: ClassVar[str] = "desktop"
    name: str = Field("desktop", pattern=r"^[a-z][a-z0-9_-]*$")
    display: tuple[int, int] = Field((1024, 768), description="The virtual display's width and height.")
    home: Path | None = Field(
        None, description="A folder copied into each episode's home (relative to the file)."
    )
    local_files: Literal["folder", "any"] = Field(
        "folder",
        description="Where `home:` may be: `folder`, inside the suite file's folder; `any`, anywhere "
        "(only for a folder you mean every episode to get a copy of).",
    )
    desktop: dict[str, DesktopTask] = Field(min_length=1)
    max_steps: int | None = Field(
        None,
        ge=1,
        le=500,
        description="The most steps its episodes take (a task's own wins), instead of the run's.",
    )
    end_on_success: bool = Field(
        False,
        description="End the episode as soon as the task's checks hold after a step, as a page that ends "
        "its own episodes does; off, the policy's `terminate` ends it and the checks judge the end.",
    )

    @classmethod
    def from_data(cls, path: Path, data: Any) -> Self:
        """The suite a suite file declares (`desktop:` at its top)."""
        try:
            suite = cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            raise ConfigError(f"desktop suite {path}: {where}: {msg}; fix it (docs/environments.md)") from exc
        if suite.home is not None:
            home = (path.parent / suite.home).resolve()  # an absolute `home:` stays itself
            if suite.local_files == "folder" and not home.is_relative_to(path.parent.resolve()):
                raise ConfigError(
                    f"desktop suite {path}: home {suite.home} is outside the suite's folder; move it "
                    "under the suite file's folder, or set `local_files: any` to copy it into every episode"
                )
            if not home.is_dir():
                raise ConfigError(
                    f"desktop suite {path}: home {suite.home} is not a folder; create it or drop `home`"
                )
            suite = suite.model_copy(update={"home": home})
        return suite

    @classmethod
    def builtin(cls) -> Self:
        return cls.from_data(BUILTIN, read_suite_file(BUILTIN))

    def task(self, name: str) -> DesktopTask:
        if name not in self.desktop:
            raise ConfigError(
                f"apps: suite {self.name!r} has no task {name!r}; its tasks: {', '.join(self.desktop)}"
            )
        return self.desktop[name]

    def missing(self) -> list[str]:
        """What this machine lacks to run the suite: the display's Debian packages, then each app
        its tasks launch or run that is not on PATH (Debian names them after their command)."""
        steps = [s for t in self.desktop.values() for s in t.setup]
        programs = {argv[0] for s in steps for argv in (s.launch, s.run) if argv}
        return display.missing() + sorted(APP_PACKAGES.get(p, p) for p in programs if shutil.which(p) is None)
