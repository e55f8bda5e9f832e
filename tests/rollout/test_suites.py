"""The suite contract on real pages in real Chromium: MiniWoB++'s own task pages (any task name)
and a declarative web suite of our own (docs/examples/webapp)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout.suites import get_suite, is_suite_ref, resolve, task_query
from rollout.suites.webpage import PageEnv, WebSuite
from storage.keys import blob_key
from storage.objectstore import LocalObjectStore
from tests.conftest import service_missing
from trajforge.actions import Action, ActionKind, Screen
from trajforge.domain import Observation
from trajforge.errors import ConfigError

pytestmark = pytest.mark.browser
EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "webapp" / "suite.yaml"


def _need_chromium() -> None:
    from rollout.web.env import chromium_available

    if not chromium_available():
        service_missing("Chromium or Playwright missing (apt-get install chromium)")


@pytest.fixture(scope="module")
def miniwob() -> Iterator[PageEnv]:
    _need_chromium()
    env = get_suite("miniwob").environment(None)
    assert isinstance(env, PageEnv)
    yield env
    env.close()


def _tap(obs: Observation, element: dict) -> Action:
    x1, y1, x2, y2 = element["bounds"]
    return Action(
        kind=ActionKind.CLICK, point=Screen(obs.width, obs.height).from_px((x1 + x2) // 2, (y1 + y2) // 2)
    )


def _named(obs: Observation, text: str) -> dict:
    return next(e for e in obs.elements or [] if e["kind"] == "button" and e["text"] == text)


def test_references_are_told_apart_from_app_specs() -> None:
    assert is_suite_ref("miniwob:click-button") and is_suite_ref("shop.yaml:checkout")
    assert not is_suite_ref("takeout") and not is_suite_ref("apps/my.yaml")


def test_an_unknown_task_or_suite_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match="no task 'click-buton'; did you mean click-button"):
        resolve("miniwob:click-buton")
    with pytest.raises(ConfigError, match=r"no environment suite called 'nosuch'.*trajforge\.suites"):
        resolve("nosuch:task")


def test_the_page_words_the_task_from_its_seed(miniwob: PageEnv) -> None:
    first = miniwob.describe("click-button", 11)
    assert first == miniwob.describe("click-button", 11)
    words = {miniwob.describe("click-button", seed)[0] for seed in range(8)}
    assert len(words) > 1 and all(w.startswith("Click on the ") for w in words)


def test_a_right_click_ends_the_episode_with_the_pages_reward(miniwob: PageEnv, tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "objects")
    miniwob.store = store
    instruction, params = miniwob.describe("click-button", 3)
    query = task_query("miniwob:click-button", 3, instruction, params)
    obs = miniwob.reset(query)
    # MiniWoB's task region at its own size: no phone emulation, no zoom.
    assert (obs.width, obs.height) == (160, 210) and not obs.done
    assert store.exists(blob_key(obs.screenshot))
    assert any(e["text"] == instruction for e in obs.elements or [])  # the utterance is on screen
    target = instruction.split('"')[1]
    after = miniwob.step(_tap(obs, _named(obs, target)))
    assert after.done and after.meta["reward"] == 1.0
    verdict = miniwob.verify()
    assert verdict.success and verdict.reward == 1.0


def test_a_wrong_click_is_a_failure_by_the_pages_reward(miniwob: PageEnv) -> None:
    instruction, params = miniwob.describe("click-button", 3)
    obs = miniwob.reset(task_query("miniwob:click-button", 3, instruction, params))
    wrong = next(
        e for e in obs.elements or [] if e["kind"] == "button" and e["text"] != instruction.split('"')[1]
    )
    assert miniwob.step(_tap(obs, wrong)).done
    verdict = miniwob.verify()
    assert not verdict.success and verdict.failed == "environment_reward" and verdict.reward == -1.0


def test_typing_into_a_field_is_rewarded(miniwob: PageEnv) -> None:
    instruction, params = miniwob.describe("enter-text", 5)
    obs = miniwob.reset(task_query("miniwob:enter-text", 5, instruction, params))
    field = next(e for e in obs.elements or [] if e["kind"] == "input")
    typed = miniwob.step(
        _tap(obs, field).model_copy(update={"kind": ActionKind.TYPE, "text": instruction.split('"')[1]})
    )
    assert not typed.done and any(e["text"] == instruction.split('"')[1] for e in typed.elements or [])
    assert miniwob.step(_tap(typed, _named(typed, "Submit"))).done
    assert miniwob.verify().success


def test_an_episode_not_ended_by_the_page_is_not_a_success(miniwob: PageEnv) -> None:
    instruction, params = miniwob.describe("enter-text", 6)
    miniwob.reset(task_query("miniwob:enter-text", 6, instruction, params))
    verdict = miniwob.verify()
    assert not verdict.success and verdict.failed == "not_done"


@pytest.mark.parametrize("task", ["click-widget", "enter-date", "click-collapsible", "use-spinner"])
def test_any_miniwob_task_name_works(miniwob: PageEnv, task: str) -> None:
    resolve(f"miniwob:{task}")
    instruction, params = miniwob.describe(task, 1)
    obs = miniwob.reset(task_query(f"miniwob:{task}", 1, instruction, params))
    assert instruction and obs.elements and not obs.done and "instruction_drift" not in obs.meta


def test_a_declarative_web_suite_runs_a_users_page() -> None:
    _need_chromium()
    suite = WebSuite.from_yaml(EXAMPLE)
    env = suite.environment(None)
    try:
        instruction, params = env.describe("count-up", 4)
        target = int(params["target"])
        assert instruction == f"Set the counter to {target}, then press Done."
        obs = env.reset(task_query("counter:count-up", 4, instruction, params))
        for _ in range(target):
            obs = env.step(_tap(obs, _named(obs, "+")))
        assert not obs.done
        assert env.step(_tap(obs, _named(obs, "Done"))).done
        assert env.verify().success
    finally:
        env.close()


def test_a_web_suite_file_with_a_mistake_names_it(tmp_path: Path) -> None:
    bad = tmp_path / "suite.yaml"
    bad.write_text("name: shop\nurl: http://127.0.0.1/\nhooks: {reset: '() => 0'}\n")
    with pytest.raises(ConfigError, match=r"web suite .*suite.yaml.*hooks.instruction: Field required"):
        WebSuite.from_yaml(bad)


_READS = """async () => {
  const read = (u) => new Promise((done) => {
    const x = new XMLHttpRequest();
    x.onload = () => done(x.status === 200 || x.status === 0 ? x.responseText.trim() : `status ${x.status}`);
    x.onerror = () => done('refused');
    try { x.open('GET', u); x.send(); } catch (e) { done('refused'); }
  });
  window.got = {own: await read('data/own.txt'), outside: await read('SECRET'), linked: await read('linked.txt')};
}"""


def _file_suite(tmp_path: Path, local_files: str) -> WebSuite:
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret")
    folder = tmp_path / "suite"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "own.txt").write_text("own data")
    (folder / "linked.txt").symlink_to(secret)
    (folder / "page.html").write_text("<html><body><button id=b>ok</button></body></html>")
    spec = folder / "suite.yaml"
    spec.write_text(
        "name: reader\nurl: file://{task}.html\ntasks: [page]\n"
        f"local_files: {local_files}\n"
        "hooks:\n"
        f"  reset: {_READS.replace('SECRET', secret.as_uri())!r}\n"
        "  instruction: '() => JSON.stringify(window.got)'\n"
        "  done: '() => false'\n  reward: '() => 0'\n"
    )
    return WebSuite.from_yaml(spec)


def _reads(tmp_path: Path, local_files: str) -> dict:
    """What the suite page read, under `local_files`."""
    _need_chromium()
    env = _file_suite(tmp_path, local_files).environment(None)
    try:
        instruction, _ = env.describe("page", 1)
    finally:
        env.close()
    return dict(json.loads(instruction))


def test_a_suite_page_reads_only_its_own_folder(tmp_path: Path) -> None:
    got = _reads(tmp_path, "folder")
    assert got["own"] == "own data"
    assert got["outside"] == "refused"  # an http page cannot read file:// URLs
    assert got["linked"] == "status 404"  # nor a file outside its folder through a link


def test_a_suite_that_says_so_may_read_any_local_file(tmp_path: Path) -> None:
    assert _reads(tmp_path, "any") == {"own": "own data", "outside": "the secret", "linked": "the secret"}


@pytest.mark.parametrize("root", ["/", "..", "../other"])
def test_a_root_outside_the_suites_folder_is_refused_unless_every_file_is_allowed(
    tmp_path: Path, root: str
) -> None:
    """`root: /` once served the whole filesystem to the suite's pages, undocumented."""
    (tmp_path / "suite").mkdir()
    spec = tmp_path / "suite" / "suite.yaml"
    body = "name: reader\nurl: file://{task}.html\nhooks: {reset: '() => 0', instruction: '() => \"x\"', done: '() => false', reward: '() => 0'}\n"
    spec.write_text(body + f"root: {root}\n")
    with pytest.raises(ConfigError, match=r"root .* is outside the suite's folder.*`local_files: any`"):
        WebSuite.from_yaml(spec)
    spec.write_text(body + f"root: {root}\nlocal_files: any\n")
    assert WebSuite.from_yaml(spec).root == (spec.parent / root).resolve()
    spec.write_text(body + "root: data\n")
    assert WebSuite.from_yaml(spec).root == spec.parent / "data"


_CONTROLS = """<html><head><meta charset="utf-8"></head><body><div id=app>
<button id=close aria-label="Close dialog">×</button>
<button id=menu title="Main menu">☰</button>
<a id=home href="#"><img alt="Home page" src="data:image/gif;base64,R0lGODlhAQABAAAAACw="
   width=16 height=16></a>
<button id=save>Save</button>
<input id=remember type=checkbox> Remember me<br>
<input id=news type=checkbox><label for=news>Send me news</label><br>
<label>Email <input id=email placeholder="you@example.com"></label>
<input id=city placeholder="City">
<span id=lbl>Quantity</span><input id=qty aria-labelledby=lbl><br>
<label for=size>Size</label>
<select id=size><option>Small</option><option selected>Medium</option><option>Large</option></select>
<select id=pay><option>Card</option><option>Cash</option></select>
</div></body></html>"""


def test_every_control_has_the_name_a_user_sees(tmp_path: Path) -> None:
    """Icon buttons by aria-label, title or alt; checkboxes by their label or the words after them;
    fields by label, aria-labelledby or placeholder: never a glyph or "on"."""
    _need_chromium()
    (tmp_path / "controls.html").write_text(_CONTROLS)
    env = WebSuite.from_yaml(_controls_suite(tmp_path)).environment(None)
    try:
        obs = env.reset(task_query("controls:controls", 1, "look", {}))
    finally:
        env.close()
    names = {e["id"]: e["text"] for e in obs.elements or [] if e["kind"] != "text"}
    assert names == {
        "close": "Close dialog",
        "menu": "Main menu",
        "home": "Home page",
        "save": "Save",
        "remember": "Remember me",
        "news": "Send me news",
        "email": "Email",
        "city": "City",
        "qty": "Quantity",
        "size": "Size: Medium",
        "pay": "Card",
    }


def test_a_select_opens_as_a_list_of_options_to_click_or_type_into(tmp_path: Path) -> None:
    """A closed select's native drop-down never reaches a headless screenshot: a click opens it in
    place, its options become elements, a click on one chooses it (the page hears `change`) and
    closes the list; typing into a select chooses the option of that text."""
    _need_chromium()
    (tmp_path / "controls.html").write_text(
        _CONTROLS.replace(
            "<select id=size>", "<select id=size onchange='window.changes=(window.changes||0)+1'>"
        )
    )
    env = WebSuite.from_yaml(_controls_suite(tmp_path, "() => window.changes || 0")).environment(None)
    try:
        obs = env.reset(task_query("controls:controls", 1, "look", {}))
        assert not [e for e in obs.elements or [] if e["tag"] == "option"]
        opened = env.step(_tap(obs, _named(obs, "Size: Medium")))
        options = [(e["text"], e["checked"]) for e in opened.elements or [] if e["tag"] == "option"]
        assert options == [("Small", False), ("Medium", True), ("Large", False)]
        assert opened.screenshot != obs.screenshot  # the list is on the screen, not in a hidden popup
        chosen = env.step(_tap(opened, _named(opened, "Large")))
        assert _named(chosen, "Size: Large") and not [
            e for e in chosen.elements or [] if e["tag"] == "option"
        ]
        assert env.verify().reward == 1  # the page heard one change
        element = _named(chosen, "Size: Large")
        typed = env.step(_tap(chosen, element).model_copy(update={"kind": ActionKind.TYPE, "text": "sma"}))
        assert _named(typed, "Size: Small") and env.verify().reward == 2
        assert _named(env.step(_tap(typed, _named(typed, "Card"))), "Card")  # the other one opens
    finally:
        env.close()


def test_a_scrolled_page_shows_its_visible_part_and_every_element_inside_the_shot(tmp_path: Path) -> None:
    """Scrolling moves the region's top above the viewport: the screenshot begins at the viewport's
    edge, and the elements are measured from there (an explorer tapping an element's centre once
    hit a point below a 160x132 shot on MiniWoB's click-pie)."""
    _need_chromium()
    (tmp_path / "controls.html").write_text(
        "<html><body style='margin:0'><div id=app style='height:900px;width:300px'>"
        "<button>Top</button><div style='height:700px'></div><button onclick='window.hit=1'>Low</button>"
        "</div></body></html>"
    )
    env = WebSuite.from_yaml(_controls_suite(tmp_path, "() => window.hit || 0")).environment(None)
    try:
        obs = env.reset(task_query("controls:controls", 1, "look", {}))
        assert (obs.width, obs.height) == (300, 320)  # the viewport cuts the 900-pixel region
        down = Action(kind=ActionKind.SWIPE, point=(500, 500), direction="up")
        for _ in range(6):  # 120 pixels a swipe, to the foot of the page
            obs = env.step(down)
        assert obs.elements and all(
            0 <= x1 <= x2 <= obs.width and 0 <= y1 <= y2 <= obs.height
            for x1, y1, x2, y2 in (e["bounds"] for e in obs.elements)
        )
        env.step(_tap(obs, _named(obs, "Low")))
        assert env.verify().reward == 1  # the centre it measured is where the button is
    finally:
        env.close()


def _controls_suite(folder: Path, reward: str = "() => 0") -> Path:
    spec = folder / "suite.yaml"
    spec.write_text(
        "name: controls\nurl: file://{task}.html\ntasks: [controls]\nregion: '#app'\nhooks:\n"
        f"  reset: '() => 0'\n  instruction: '() => \"look\"'\n  done: '() => true'\n  reward: '{reward}'\n"
    )
    return spec


def test_a_hook_that_throws_is_the_suites_mistake_not_a_crashed_device(tmp_path: Path) -> None:
    _need_chromium()
    from rollout.suites.webpage import HookError

    (tmp_path / "page.html").write_text("<html><body><button id=b>ok</button></body></html>")
    spec = tmp_path / "suite.yaml"
    spec.write_text(
        "name: broken\nurl: file://{task}.html\nhooks:\n  reset: '() => 0'\n  instruction: '() => \"go\"'\n"
        "  done: '() => window.state.done'\n  reward: '() => 0'\n"
    )
    env = WebSuite.from_yaml(spec).environment(None)
    try:
        assert env.describe("page", 1) == ("go", {})
        with pytest.raises(
            HookError, match=r"its done, reward or reason hook threw TypeError: .*reading .done."
        ):
            env.reset(task_query("broken:page", 1, "go", {}))
    finally:
        env.close()


def test_a_browser_dropping_its_connection_prints_nothing_over_the_commands_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A page closed while its favicon loads broke the pipe mid-answer, and the file server printed
    that traceback to stderr, under the one-line error of a refused command."""
    from rollout.web.files import served

    server = served(tmp_path)._server
    try:
        raise BrokenPipeError(32, "Broken pipe")
    except BrokenPipeError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == ""
    assert caplog.records == []
    try:
        raise ValueError("a fault of ours")
    except ValueError:
        server.handle_error(None, ("127.0.0.1", 2))
    assert [r.getMessage() for r in caplog.records] == ["suite files: answering ('127.0.0.1', 2) failed"]
    assert "Logging error" not in capsys.readouterr().err
