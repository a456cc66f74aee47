"""`harness view`: the JSON endpoints on hand-written runs, the command line, and the page in headless
Chromium against a real training run (tests/conftest.py `scripted_training_run`).

In CI (CI=true) a missing browser is a failure, not a skip: the end-to-end test must run there.
"""

from __future__ import annotations

import json
import math
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx
import pytest
from fastapi.testclient import TestClient

from envs.grading import Grade
from harness.agent.trajectory import ParsedCall, Segment, Summary, Trajectory, Turn
from harness.cli import main
from harness.inspection.viewer import LEARNER_FILE, STATIC, create_app, find_tokenizer
from harness.rollouts.store import RunStore, append_line

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement

REPO = Path(__file__).resolve().parents[3]
ARTIFACTS = REPO / "test-artifacts"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
WAIT_S = 30.0


# Hand-written runs --------------------------------------------------------------------------------


def turn(kind: str, generated: list[int], appended: list[int], logprob: float = -0.5) -> Turn:
    return Turn(
        kind=kind,  # type: ignore[arg-type]
        text=f"{kind} text",
        generated_ids=generated,
        logprobs=[logprob] * len(generated),
        appended_ids=appended,
    )


def grade(task: str, reward: float) -> Grade:
    return Grade(
        task_id=task, correct=reward, reward=reward, fail_to_pass={"tests/test_x.py::test_x": "passed"},
        pass_to_pass={}, patch_applied=True, dropped_paths=[], simplicity=None, duration_s=0.1,
    )  # fmt: skip


def trajectory(task: str, sample: int, reward: float, status: str = "ok", version: int = 0) -> Trajectory:
    """Two segments: an action and a self-summary, then one action after the summary.

    Segment 0 ids: prompt 1 2 3 | generated 10 11 | appended 4 5 | summary 12 13 14  (mask 1 on 5 ids)
    Segment 1 ids: prompt 1 2 6 | generated 15 | appended 7                         (mask 1 on 1 id)
    """
    first = Segment(
        index=0,
        prompt_ids=[1, 2, 3],
        turns=[turn("action", [10, 11], [4, 5]), turn("summary", [12, 13, 14], [])],
    )
    second = Segment(index=1, prompt_ids=[1, 2, 6], turns=[turn("action", [15], [7], logprob=-0.25)])
    return Trajectory(
        id=f"{task}/{sample}", run="r", task_id=task, group_id=f"{task}@v{version}", sample_index=sample,
        policy="hf:tiny", policy_version=version, seed=sample, trainable=True, segments=[first, second],
        summaries=[Summary(segment=0, text="summary text", tokens_before=10, tokens_after=3)],
        final_diff="--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n", grade=grade(task, reward),
        reward=reward, status=status,  # type: ignore[arg-type]
    )  # fmt: skip


ROLLOUTS = [
    trajectory("a", 0, 1.0),
    trajectory("a", 1, 0.0),
    trajectory("a", 2, 0.0, status="infra_error"),
    trajectory("b", 0, 1.0, version=1),
    trajectory("b", 1, 1.0, version=1),
]


def write_run(root: Path, trajectories: list[Trajectory], config: dict[str, Any]) -> Path:
    store = RunStore(root)
    store.create(config)
    for t in trajectories:
        store.append_trajectory(t)
    return root


@pytest.fixture
def rollout_run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "rollouts", ROLLOUTS, {"policy": "scripted:gold"})


def client(run: Path) -> TestClient:
    return TestClient(create_app(run))


def ids(rows: list[dict[str, Any]]) -> list[str]:
    return [row["id"] for row in rows]


# The endpoints ------------------------------------------------------------------------------------


def test_the_list_filters_by_task_status_reward_and_policy_version(rollout_run: Path) -> None:
    api = client(rollout_run)
    info = api.get("/api/run").json()
    assert info["kind"] == "rollouts" and info["trajectories"] == 5
    assert (info["tasks"], info["statuses"], info["policy_versions"]) == (
        ["a", "b"],
        ["infra_error", "ok"],
        [0, 1],
    )
    assert info["steps"] == [] and info["tokenizer"] is None

    def listed(**params: object) -> list[str]:
        response = api.get("/api/trajectories", params=params)
        assert response.status_code == 200, response.text
        return ids(response.json())

    assert listed() == ["a/0", "a/1", "a/2", "b/0", "b/1"]
    assert listed(task="a") == ["a/0", "a/1", "a/2"]
    assert listed(status="infra_error") == ["a/2"]
    assert listed(min_reward=0.5) == ["a/0", "b/0", "b/1"]
    assert listed(max_reward=0.5) == ["a/1", "a/2"]
    assert listed(policy_version=1) == ["b/0", "b/1"]
    assert listed(task="a", min_reward=0.5) == ["a/0"]
    assert listed(step=0) == []  # rollouts outside training have no step
    assert api.get("/api/trajectories", params={"tsak": "a"}).status_code == 422


def test_without_learner_records_the_advantage_is_group_relative(rollout_run: Path) -> None:
    rows = {row["id"]: row for row in client(rollout_run).get("/api/trajectories").json()}
    # Group a: the infra error takes no part, so the mean is 0.5; group b is uniform.
    expected = {"a/0": 0.5, "a/1": -0.5, "a/2": 0.0, "b/0": 0.0, "b/1": 0.0}
    assert {k: row["advantage"] for k, row in rows.items()} == pytest.approx(expected)
    assert {row["advantage_source"] for row in rows.values()} == {"group"}
    tokens = client(rollout_run).get("/api/trajectories/a/0").json()["segments"][0]["tokens"]
    assert tokens["learner_logprobs"] is None and tokens["importance_weights"] is None


def test_a_trajectory_has_its_segments_turns_summary_boundary_diff_and_grade(rollout_run: Path) -> None:
    detail = client(rollout_run).get("/api/trajectories/" + quote("a/0", safe="")).json()
    first, second = detail["segments"]
    assert (first["closed_by_summary"], second["closed_by_summary"]) == (True, False)
    assert [(t["kind"], t["start"], t["generated"], t["appended"]) for t in first["turns"]] == [
        ("action", 3, 2, 2),
        ("summary", 7, 3, 0),
    ]
    assert detail["summaries"] == [
        {"segment": 0, "text": "summary text", "tokens_before": 10, "tokens_after": 3}
    ]
    tokens = first["tokens"]
    assert tokens["ids"] == [1, 2, 3, 10, 11, 4, 5, 12, 13, 14]
    assert tokens["mask"] == [0, 0, 0, 1, 1, 0, 0, 1, 1, 1]
    assert tokens["sampler_logprobs"] == [None, None, None, -0.5, -0.5, None, None, -0.5, -0.5, -0.5]
    assert tokens["text"] is None  # scripted policy: no tokenizer, ids only
    assert detail["final_diff"].endswith("+b\n")
    assert detail["grade"]["fail_to_pass"] == {"tests/test_x.py::test_x": "passed"}
    assert detail["row"]["summaries"] == 1


def test_learner_records_give_learner_logprobs_importance_weights_and_step(tmp_path: Path) -> None:
    run = write_run(tmp_path / "train", ROLLOUTS[:2], {"model": str(tmp_path / "no-model"), "steps": 1})
    learner = [-0.4, -0.6, -0.5, -0.5, -0.7]
    append_line(run / LEARNER_FILE, json.dumps(
        {"step": 3, "trajectory_id": "a/0", "segment": 0, "advantage": 0.75, "learner_logprobs": learner}
    ))  # fmt: skip
    append_line(run / LEARNER_FILE, json.dumps(
        {"step": 3, "trajectory_id": "a/0", "segment": 1, "advantage": 0.75, "learner_logprobs": [-0.1, -0.2]}
    ))  # fmt: skip
    api = client(run)
    assert api.get("/api/run").json()["kind"] == "training"
    rows = {row["id"]: row for row in api.get("/api/trajectories").json()}
    assert (rows["a/0"]["advantage"], rows["a/0"]["advantage_source"], rows["a/0"]["step"]) == (
        0.75,
        "learner",
        3,
    )
    # Not in learner.jsonl: the group-relative advantage, and its policy version as its step.
    assert (rows["a/1"]["advantage"], rows["a/1"]["advantage_source"], rows["a/1"]["step"]) == (
        -0.5,
        "group",
        0,
    )

    first, second = api.get("/api/trajectories/a/0").json()["segments"]
    tokens = first["tokens"]
    assert tokens["learner_logprobs"] == [None, None, None, -0.4, -0.6, None, None, -0.5, -0.5, -0.7]
    weights = [w for w in tokens["importance_weights"] if w is not None]
    assert weights == pytest.approx([math.exp(lp + 0.5) for lp in learner])
    assert first["advantage"] == 0.75 and first["note"] is None
    # Two learner log-probs for one model token: shown as absent, with the reason.
    assert second["tokens"]["learner_logprobs"] is None
    assert "2 log-probs" in second["note"] and "1 model tokens" in second["note"]
    assert api.get("/api/trajectories", params={"step": 3}).json()[0]["id"] == "a/0"


def test_a_group_shows_its_rollouts_side_by_side(rollout_run: Path) -> None:
    group = client(rollout_run).get("/api/groups/" + quote("a@v0", safe="")).json()
    assert group["task_id"] == "a" and group["reward_mean"] == pytest.approx(1 / 3)
    members = group["members"]
    assert [m["row"]["sample_index"] for m in members] == [0, 1, 2]
    assert [m["row"]["advantage"] for m in members] == pytest.approx([0.5, -0.5, 0.0])
    assert members[0]["last_text"] == "action text" and members[0]["final_diff"].startswith("--- a/x.py")


def test_unknown_ids_are_404_naming_them(rollout_run: Path) -> None:
    api = client(rollout_run)
    response = api.get("/api/trajectories/zz/9")
    assert response.status_code == 404 and response.json()["detail"] == "no trajectory 'zz/9' in this run"
    assert api.get("/api/groups/zz@v0").status_code == 404


def test_a_run_being_written_is_read_again(rollout_run: Path) -> None:
    api = client(rollout_run)
    store = RunStore(rollout_run)
    assert len(api.get("/api/trajectories").json()) == 5
    store.append_trajectory(trajectory("c", 0, 1.0))
    assert ids(api.get("/api/trajectories").json())[-1] == "c/0"
    with store.trajectories_path.open("a") as f:  # a writer in the middle of its next line
        f.write('{"schema_version":1,"id":"c/1","ru')
    assert len(api.get("/api/trajectories").json()) == 6
    assert api.get("/api/metrics").json() == {"steps": 0, "plots": []}
    store.append_metrics({"step": 0, "reward_mean": 0.5})
    assert api.get("/api/metrics").json()["plots"][0]["series"][0]["points"] == [[0.0, 0.5]]


def test_plots_draw_the_training_metrics_and_leave_out_non_finite_values(rollout_run: Path) -> None:
    store = RunStore(rollout_run)
    for step, reward in enumerate([0.25, float("nan"), 0.75]):
        store.append_metrics({
            "step": step, "reward_mean": reward, "pass_rate": reward / 2, "approx_kl": 0.01 * step,
            "clip_fraction": 0.1, "summaries_per_trajectory": 1.0 + step, "grad_norm": float("nan"),
        })  # fmt: skip
    response = client(rollout_run).get("/api/metrics")
    assert "NaN" not in response.text
    metrics = response.json()
    assert metrics["steps"] == 3
    plots = {plot["title"]: plot["series"] for plot in metrics["plots"]}
    assert list(plots) == ["reward", "pass rate", "KL", "clip fraction", "summaries per trajectory"]
    assert plots["reward"] == [{"key": "reward_mean", "points": [[0.0, 0.25], [2.0, 0.75]]}]
    assert plots["KL"][0]["key"] == "approx_kl" and len(plots["KL"][0]["points"]) == 3
    assert plots["summaries per trajectory"][0]["points"][-1] == [2.0, 3.0]


class Assets(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


def test_the_page_and_its_assets_come_from_the_package(rollout_run: Path) -> None:
    api = client(rollout_run)
    page = api.get("/")
    assert page.status_code == 200 and "harness view" in page.text
    parser = Assets()
    parser.feed(page.text)
    files = [url for url in parser.urls if url.startswith("/static/")]
    assert files == ["/static/style.css", "/static/app.js"]
    assert all(url.startswith(("/static/", "#", "data:")) for url in parser.urls), parser.urls
    for url in files:
        assert api.get(url).status_code == 200
        text = (STATIC / url.removeprefix("/static/")).read_text()
        # Nothing is fetched from the internet; the one URL in app.js is the SVG namespace.
        assert re.findall(r"\w+://[^\s\"')]+", text) in ([], ["http://www.w3.org/2000/svg"]), url


def test_the_learner_file_is_the_one_the_trainer_writes() -> None:
    from harness.rollouts.store import RunStore

    WRITTEN = RunStore(Path("run")).learner_path.name

    assert LEARNER_FILE == WRITTEN


def test_tokens_are_decoded_one_by_one_with_the_runs_tokenizer(tmp_path: Path, tiny_model_path: Path) -> None:
    from transformers import AutoTokenizer

    run = write_run(tmp_path / "run", ROLLOUTS[:1], {"policy": f"hf:{tiny_model_path}"})
    api = client(run)
    assert api.get("/api/run").json()["tokenizer"] == str(tiny_model_path)
    tokens = api.get("/api/trajectories/a/0").json()["segments"][0]["tokens"]
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_path))
    assert tokens["text"] == [tokenizer.decode([i]) for i in tokens["ids"]]


def test_a_tito_run_finds_the_tokenizer_of_the_served_model_folder(
    tmp_path: Path, tiny_model_path: Path
) -> None:
    """`harness serve` names its model by its folder, so `tito:FOLDER@URL` names the tokenizer too."""
    run = write_run(
        tmp_path / "run", ROLLOUTS[:1], {"policy": f"tito:{tiny_model_path}@http://127.0.0.1:1/v1"}
    )
    assert find_tokenizer(run) == tiny_model_path


def test_without_the_configured_model_the_latest_checkpoint_has_the_tokenizer(
    tmp_path: Path, tiny_model_path: Path
) -> None:
    run = write_run(tmp_path / "run", ROLLOUTS[:1], {"model": str(tmp_path / "moved-away")})
    assert find_tokenizer(run) is None
    for step in (2, 10):
        shutil.copytree(tiny_model_path, run / "checkpoints" / f"step-{step}" / "model")
    assert find_tokenizer(run) == run / "checkpoints" / "step-10" / "model"


def test_an_unreadable_tokenizer_leaves_token_ids_only(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer.json").write_text("not json")
    run = write_run(tmp_path / "run", ROLLOUTS[:1], {"policy": f"hf:{model}"})
    api = client(run)
    tokens = api.get("/api/trajectories/a/0").json()["segments"][0]["tokens"]
    assert tokens["text"] is None and tokens["ids"][:3] == [1, 2, 3]
    assert api.get("/api/run").json()["tokenizer"] is None


# The command line ---------------------------------------------------------------------------------


def test_a_missing_run_is_one_line_and_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["view", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err == f"harness view: {tmp_path / 'nothing'}: no such run directory\n"
    (tmp_path / "empty").mkdir()
    assert main(["view", str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err.endswith("not a run directory (no trajectories.jsonl)\n")


def test_a_busy_port_is_one_line_and_exit_code_2(
    rollout_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["view", str(rollout_run), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"harness view: cannot listen on 127.0.0.1:{port}") and err.count("\n") == 1


@dataclass
class Served:
    url: str
    process: subprocess.Popen[str]


@contextmanager
def harness_view(run: Path) -> Iterator[Served]:
    """`harness view RUN --port 0` in a subprocess, stopped with Ctrl-C (SIGINT) at the end."""
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "view", str(run), "--port", "0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = process.stdout
    assert output is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in output], daemon=True).start()
    try:
        first = lines.get(timeout=120)
        found = re.search(r"http://\S+/", first)
        assert found, first
        yield Served(found.group(0), process)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_harness_view_serves_the_run_on_loopback_until_ctrl_c(rollout_run: Path) -> None:
    with harness_view(rollout_run) as served:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", served.url)
        assert "harness view" in httpx.get(served.url).text
        assert httpx.get(served.url + "api/run").json()["trajectories"] == 5
    assert served.process.returncode == 0


# The page in headless Chromium --------------------------------------------------------------------


def browser_missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    for program, package in (("chromium", "chromium"), ("chromedriver", "chromium-driver")):
        if shutil.which(program) is None:
            return f"{program} is not installed (apt-get install {package})"
    return None


def require_browser() -> None:
    why = browser_missing()
    if why is None:
        return
    if IN_CI:
        pytest.fail(f"headless Chromium needed in CI: {why}")
    pytest.skip(why)


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(shutil.which("chromium"))
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1400,1000")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=shutil.which("chromedriver")))
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: WebDriver, found: Callable[[WebDriver], Any], what: str) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S).until(found, message=f"waited {WAIT_S:.0f}s for {what}")


def elements(driver: WebDriver, css: str) -> list[WebElement]:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, css)


def save_screenshot(driver: WebDriver, tmp_path: Path, name: str) -> Path:
    """Into tmp_path, and copied to test-artifacts/ at the repository root for CI to keep."""
    path = tmp_path / name
    assert driver.save_screenshot(str(path)), name
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(path, ARTIFACTS / name)
    return path


def background(element: WebElement) -> str:
    return str(element.value_of_css_property("background-color"))


def test_the_viewer_in_headless_chromium(
    scripted_training_run: Path, browser: WebDriver, tmp_path: Path
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run = scripted_training_run
    with harness_view(run) as served:
        url = served.url
        rows = httpx.get(url + "api/trajectories").json()
        summarized = [r for r in rows if r["summaries"] > 0]
        positive = next((r for r in summarized if r["advantage"] > 0), None)
        negative = next((r for r in summarized if r["advantage"] < 0), None)
        assert positive and negative, "the run needs summarized rollouts of both advantage signs"

        # The list, then a filter that shortens it.
        browser.get(url)
        wait_for(browser, lambda d: len(elements(d, "tr.traj-row")) == len(rows), "the full list")
        Select(browser.find_element(By.ID, "filter-task")).select_by_value(positive["task_id"])
        of_task = [r for r in rows if r["task_id"] == positive["task_id"]]
        wait_for(browser, lambda d: len(elements(d, "tr.traj-row")) == len(of_task), "the filtered list")
        assert 0 < len(of_task) < len(rows)
        assert {e.get_attribute("data-task") for e in elements(browser, "tr.traj-row")} == {
            positive["task_id"]
        }
        Select(browser.find_element(By.ID, "filter-step")).select_by_value(str(positive["step"]))
        of_step = [r for r in of_task if r["step"] == positive["step"]]
        wait_for(browser, lambda d: len(elements(d, "tr.traj-row")) == len(of_step), "the list of one step")
        assert f"{len(of_step)} of {len(rows)} trajectories" in browser.find_element(By.ID, "list-count").text

        # A trajectory opens from the list.
        browser.find_element(By.CSS_SELECTOR, f'tr.traj-row[data-id="{positive["id"]}"] a.traj-link').click()
        wait_for(
            browser, lambda d: elements(d, f'#trajectory[data-id="{positive["id"]}"] .token-view'), "tokens"
        )

        # Shading: loss mask 0 and 1 differ; the tokens of a positive advantage are shaded as such.
        masked_out = elements(browser, ".token-view .tok.m0")[0]
        trained = elements(browser, ".token-view .tok.m1.adv-pos")
        assert trained and not elements(browser, ".token-view .tok.m1.adv-neg")
        masked_color, positive_color = background(masked_out), background(trained[0])
        assert masked_color != positive_color

        # Hover: the sampler's and the learner's log-probs and the importance weight.
        title = str(trained[0].get_attribute("title"))
        assert re.search(r"sampler log-prob -?\d+\.\d{4}", title), title
        assert re.search(r"learner log-prob -?\d+\.\d{4}", title), title
        assert re.search(r"importance weight \d+\.\d{4}", title), title
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", trained[0])
        ActionChains(browser).move_to_element(trained[0]).perform()
        info = browser.find_element(By.ID, "token-info")
        wait_for(browser, lambda d: "importance weight" in info.text, "the hovered token's details")
        assert "learner log-prob" in info.text and "sampler log-prob" in info.text

        # Summary boundaries: between segments in both views, and at the summary's first token.
        assert elements(browser, "#conversation .summary-boundary.segment-end")
        assert elements(browser, "#tokens .summary-boundary.segment-end")
        assert elements(browser, "#tokens .summary-boundary.summary-start")
        assert elements(browser, ".token-view .tok.m1.summary-tok")
        assert elements(browser, "#conversation .turn.summary-turn .badge.summary")
        # The legend follows the shading; the controls are never under the hover details.
        assert "advantage > 0" in browser.find_element(By.ID, "token-legend").text
        Select(browser.find_element(By.ID, "shade-by")).select_by_value("sampler")
        wait_for(
            browser, lambda d: "sampler log-prob" in d.find_element(By.ID, "token-legend").text, "legend"
        )
        assert "advantage" not in browser.find_element(By.ID, "token-legend").text
        # This run had no dense credit: shaded by the teacher's gap, every model token says so.
        Select(browser.find_element(By.ID, "shade-by")).select_by_value("gap")
        wait_for(
            browser,
            lambda d: "not scored by a teacher" in d.find_element(By.ID, "token-legend").text,
            "legend",
        )
        grey = browser.execute_script(
            "return [...document.querySelectorAll('.token-view .tok.m1')].every("
            "t => t.style.backgroundColor === 'rgba(100, 116, 139, 0.22)')"
        )
        assert grey
        Select(browser.find_element(By.ID, "shade-by")).select_by_value("advantage")
        checkbox = browser.find_element(By.ID, "hide-prompts")
        token = elements(browser, ".token-view .tok.m1.adv-pos")[0]  # drawn again with the shading
        for block in ("start", "center", "end"):
            browser.execute_script(f"arguments[0].scrollIntoView({{block: '{block}'}})", token)
            on_top = browser.execute_script(
                "const r = arguments[0].getBoundingClientRect();"
                "return document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2) === arguments[0];",
                checkbox,
            )
            assert on_top, f"the fold checkbox is covered (a token scrolled to the {block})"
        shown = len(elements(browser, ".token-view .tok"))
        browser.find_element(By.ID, "hide-prompts").click()
        wait_for(browser, lambda d: elements(d, ".token-view .tok.folded"), "the folded prompts")
        assert len(elements(browser, ".token-view .tok")) < shown
        browser.execute_script("document.getElementById('tokens').scrollIntoView()")
        save_screenshot(browser, tmp_path, "viewer-tokens.png")

        # A negative advantage is shaded in another color.
        browser.get(url + "#/t/" + quote(negative["id"], safe=""))
        wait_for(
            browser, lambda d: elements(d, f'#trajectory[data-id="{negative["id"]}"] .token-view'), "tokens"
        )
        negative_tokens = elements(browser, ".token-view .tok.m1.adv-neg")
        assert negative_tokens and background(negative_tokens[0]) not in (
            positive_color,
            masked_color,
        )

        # Its group, side by side.
        browser.find_element(By.CSS_SELECTOR, ".meta a.group-link").click()
        members = [r for r in rows if r["group_id"] == negative["group_id"]]
        wait_for(browser, lambda d: len(elements(d, ".rollout-col")) == len(members), "the group's rollouts")
        rewards = [e.text for e in elements(browser, ".rollout-col .reward")]
        assert rewards == [f"{r['reward']:.3f}" for r in sorted(members, key=lambda r: r["sample_index"])]

        # The training plots.
        browser.find_element(By.ID, "nav-plots").click()
        wait_for(browser, lambda d: elements(d, "figure.plot svg.plot-svg"), "the plots")
        steps = len((run / "metrics.jsonl").read_text().splitlines())
        titles = [e.get_attribute("data-title") for e in elements(browser, "figure.plot")]
        assert titles == ["reward", "pass rate", "KL", "clip fraction", "summaries per trajectory"]
        for figure in elements(browser, "figure.plot"):
            path = figure.find_element(By.CSS_SELECTOR, "path.series")
            point = r"[\d.]+,[\d.]+"
            assert re.fullmatch(rf"M{point}( L{point}){{{steps - 1}}}", str(path.get_attribute("d")))
            assert len(figure.find_elements(By.CSS_SELECTOR, "circle.point")) >= steps
        save_screenshot(browser, tmp_path, "viewer-plots.png")


def test_a_training_run_s_learner_logprobs_line_up_with_the_sampler_s(
    scripted_training_run: Path,
) -> None:
    """Same weights in sampler and learner: a misaligned token would show a weight far from 1."""
    api = client(scripted_training_run)
    rows = [r for r in api.get("/api/trajectories").json() if r["advantage_source"] == "learner"]
    assert rows
    for row in rows[:12]:
        for segment in api.get("/api/trajectories/" + quote(row["id"], safe="")).json()["segments"]:
            tokens = segment["tokens"]
            assert segment["note"] is None and tokens["learner_logprobs"] is not None, row["id"]
            weights = [w for w in tokens["importance_weights"] if w is not None]
            assert len(weights) == sum(tokens["mask"])
            assert all(0.9 < w < 1.1 for w in weights), (row["id"], min(weights), max(weights))


def test_hint_and_refined_rollouts_are_marked_in_the_list() -> None:
    """A hint rollout (credit.hint_rollouts, task id TASK.hint) carries the mark the list and the page show
    as a `hint` badge, a refined rollout (credit.critique, task id TASK.critique) a `refined` one; the
    student's own rollouts neither."""
    from harness.agent.trajectory import Trajectory
    from harness.inspection.viewer import trajectory_row

    def row(task_id: str) -> tuple[bool, bool]:
        t = Trajectory(
            id=f"{task_id}/0", run="r", task_id=task_id, group_id=f"{task_id}@v0", sample_index=0,
            policy="hf:x", seed=0, trainable=True,
        )  # fmt: skip
        made = trajectory_row(t, 0.0, None, training=True)
        return made.hint, made.refined

    assert row("demo-add.hint") == (True, False) and row("demo-add.critique") == (False, True)
    assert row("demo-add") == (False, False)
    app = (STATIC / "app.js").read_text()
    assert "hintBadge()" in app and "refinedBadge()" in app  # drawn beside the task id when set


def credited_trajectory() -> Trajectory:
    """One segment: run_tests (1 of 2 pass), edit, run_tests (2 of 2): with turn_weight 0.5 the edit's
    turn gets +0.25 (harness/training/turn_credit.py), the two runs 0."""

    def call(name: str, generated: list[int], observation: str | None = None) -> Turn:
        made = turn("action", generated, [4])
        made.tool_call = ParsedCall(name=name, arguments={})
        made.observation = observation
        return made

    segment = Segment(
        index=0,
        prompt_ids=[1, 2, 3],
        turns=[
            call("run_tests", [10], "1 passed, 1 failed in 0.1s"),
            call("edit", [11, 12]),
            call("run_tests", [13], "2 passed in 0.1s"),
        ],
    )
    return Trajectory(
        id="c/0", run="r", task_id="c", group_id="c@v0", sample_index=0, policy="hf:tiny", seed=0,
        trainable=True, segments=[segment], final_diff="", grade=grade("c", 1.0), reward=1.0, status="ok",
    )  # fmt: skip


def test_turn_level_credit_is_shown_on_each_turn(tmp_path: Path, browser: WebDriver) -> None:
    """A run trained with `credit.turn_weight`: the API gives each turn its bonus, recomputed from the
    trajectory as the trainer did, and the page shades the credited turn and names its bonus; a run
    without it shows none."""
    from selenium.webdriver.common.by import By

    config = {"model": str(tmp_path / "no-model"), "credit": {"turn_weight": 0.5, "turn_clip": 1.0}}
    run = write_run(tmp_path / "credited", [credited_trajectory()], config)
    detail = client(run).get("/api/trajectories/c%2F0").json()
    assert [t["turn_credit"] for t in detail["segments"][0]["turns"]] == [0.0, 0.25, 0.0]
    plain = write_run(tmp_path / "plain", [credited_trajectory()], {"model": str(tmp_path / "no-model")})
    assert [
        t["turn_credit"] for t in client(plain).get("/api/trajectories/c%2F0").json()["segments"][0]["turns"]
    ] == [None] * 3
    with harness_view(run) as served:
        browser.get(served.url + "#/t/c%2F0")
        credited = wait_for(
            browser, lambda d: elements(d, "#conversation .turn.credited.adv-pos"), "a credited turn"
        )
        assert len(credited) == 1
        chip = credited[0].find_element(By.CSS_SELECTOR, ".turn-head .chip.turn-credit")
        assert chip.text == "turn credit +0.250"
        assert len(elements(browser, "#conversation .turn-credit")) == 3  # every turn names its bonus, 0 too


def test_critiques_are_shown_beside_the_rollout_they_criticised_and_the_one_they_produced(
    tmp_path: Path, browser: WebDriver
) -> None:
    """A run trained with `credit.critique` and `teacher_training`: the failed rollout's page shows each
    critique written of it with a link to the refined rollout it started; the refined rollout's page shows
    the critique its statement held and links back; a hint rollout of such a run carries the `teacher` mark
    beside `hint`. A line of another schema in critiques.jsonl is skipped, not an error."""
    from selenium.webdriver.common.by import By

    from harness.rollouts.store import CritiqueLine

    def made(task_id: str, sample: int, reward: float) -> Trajectory:
        t = credited_trajectory()
        return t.model_copy(
            update={"id": f"{task_id}/{sample}", "task_id": task_id, "group_id": f"{task_id}@v0",
                    "sample_index": sample, "reward": reward}
        )  # fmt: skip

    failed, refined, hint = made("c", 0, 0.0), made("c.critique", 3, 1.0), made("c.hint", 0, 1.0)
    config = {
        "model": str(tmp_path / "no-model"),
        "credit": {"critique": 2, "teacher_training": "learnability"},
    }
    run = write_run(tmp_path / "run", [failed, refined, hint], config)
    lines = [
        CritiqueLine(step=0, failed_id="c/0", index=0, text="Turn 2: the edit <b>misses</b> the sign.",
                     ids=[5, 6], logprobs=[-1.0, -2.0], refined_id="c.critique/3"),
        CritiqueLine(step=0, failed_id="c/0", index=1, text="Run the tests first.", ids=[7],
                     logprobs=[-0.5], refined_id=None),
    ]  # fmt: skip
    (run / "critiques.jsonl").write_text(
        "".join(c.model_dump_json() + "\n" for c in lines) + '{"another": "schema"}\n'
    )
    api = client(run)
    detail = api.get("/api/trajectories/c%2F0").json()
    assert [(c["index"], c["refined_id"]) for c in detail["critiques"]] == [(0, "c.critique/3"), (1, None)]
    assert detail["critique_of"] is None
    of = api.get("/api/trajectories/c.critique%2F3").json()["critique_of"]
    assert (of["failed_id"], of["text"]) == ("c/0", lines[0].text)
    rows = {r["id"]: r for r in api.get("/api/trajectories").json()}
    assert (rows["c.hint/0"]["hint"], rows["c.hint/0"]["teacher"]) == (True, True)
    assert not rows["c/0"]["teacher"] and rows["c.critique/3"]["refined"]
    with harness_view(run) as served:
        browser.get(served.url + "#/t/c%2F0")
        shown = wait_for(browser, lambda d: elements(d, "#critiques .critique"), "the critiques")
        assert [e.find_element(By.CSS_SELECTOR, ".critique-text").text for e in shown] == [
            c.text for c in lines
        ]
        shown[0].find_element(By.CSS_SELECTOR, "a.traj-link").click()
        back = wait_for(
            browser,
            lambda d: elements(d, '#trajectory[data-id="c.critique/3"] #critiques .critique-of'),
            "refined",
        )
        assert lines[0].text in back[0].text
        back[0].find_element(By.CSS_SELECTOR, "a.traj-link").click()
        wait_for(browser, lambda d: elements(d, '#trajectory[data-id="c/0"]'), "the failed rollout again")
        browser.get(served.url + "#/")
        row = wait_for(browser, lambda d: elements(d, 'tr.traj-row[data-id="c.hint/0"]'), "the hint row")[0]
        assert [b.text for b in row.find_elements(By.CSS_SELECTOR, ".badge")] == ["hint", "teacher"]
