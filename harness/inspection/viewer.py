"""`harness view RUN`: a local web viewer of a run directory, served on 127.0.0.1.

The page and its assets are the files in `viewer_static/` (vanilla JS, inline SVG; nothing is fetched
from the internet). The JSON endpoints re-read the run's files when they change, so a run that is still
being written can be watched:

    GET /api/run                       the run: kind, counts, the values each filter can take
    GET /api/trajectories?task=...     one row per trajectory, filtered (task, status, min_reward,
                                       max_reward, step, policy_version)
    GET /api/trajectories/{id}         a trajectory: conversation by segments, summaries, tokens, diff, grade
    GET /api/groups/{group_id}         a group's rollouts side by side
    GET /api/metrics                   the series of the training plots

Advantages and learner log-probs come from `learner.jsonl` (training runs); elsewhere the advantage is
the group-relative one the learner would use (`harness.training.grpo.group_advantages`, Dr. GRPO) and the
learner's log-probs are absent.
"""

from __future__ import annotations

import logging
import math
import re
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import torch
import uvicorn
import yaml
from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from envs.grading import Grade
from harness.agent.trajectory import Metrics as TrajectoryMetrics
from harness.agent.trajectory import ParsedCall, Segment, Status, Summary, Timings, Trajectory
from harness.inspection.runs import Selection, advantages
from harness.rollouts.store import LEARNER_FILE, CritiqueLine, RunStore, SegmentAdvantage, read_lines
from harness.training.grpo import group_advantages
from harness.training.turn_credit import trajectory_bonuses
from tasks.model import CRITIQUE_SUFFIX, HINT_SUFFIX

STATIC = Path(__file__).with_name("viewer_static")
HOST = "127.0.0.1"

log = logging.getLogger(__name__)

T = TypeVar("T")


class ViewerError(Exception):
    """The run cannot be shown (missing, not a run directory) or the port cannot be bound."""


# What the run's files hold ------------------------------------------------------------------------


class ModelSource(BaseModel):
    """The two keys of config.yaml that name the run's model; the rest belongs to the run's own config
    (training or rollout), so other keys are ignored here rather than rejected."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    """Training runs: the starting model folder."""
    policy: str | None = None
    """Rollout runs: `hf:PATH` for an in-process model, or a chat / scripted policy."""
    credit: dict[str, Any] = Field(default_factory=dict)
    """Training runs: the credit settings, of which the view reads `turn_weight` and `turn_clip` to show
    each turn's turn-level credit (recomputed from the trajectory, as the trainer computed it)."""

    def turn_credit(self) -> tuple[float, float] | None:
        """(weight, clip) of the run's turn-level credit, or None when it had none."""
        weight = float(self.credit.get("turn_weight") or 0.0)
        return (weight, float(self.credit.get("turn_clip", 0.5))) if weight > 0 else None

    def teacher_trained(self) -> bool:
        """Whether the run trained its hint rollouts as the teacher's own groups
        (`credit.teacher_training: learnability`)."""
        return self.credit.get("teacher_training") == "learnability"


METRICS_LINE: TypeAdapter[dict[str, float | None]] = TypeAdapter(dict[str, float | None])


# What the endpoints answer ------------------------------------------------------------------------


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunInfo(_Out):
    name: str
    path: str
    kind: Literal["training", "rollouts"]
    trajectories: int
    tokenizer: str | None
    """The folder whose tokenizer decodes token ids, when one was found."""
    tasks: list[str]
    statuses: list[str]
    steps: list[int]
    policy_versions: list[int]


class TrajectoryRow(_Out):
    id: str
    task_id: str
    group_id: str
    sample_index: int
    policy_version: int
    step: int | None
    """The training step whose batch held it (from learner.jsonl, else its policy version); None
    outside training runs."""
    reward: float
    advantage: float
    advantage_source: Literal["learner", "group"]
    status: Status
    correct: float | None
    turns: int
    summaries: int
    tokens: int
    hint: bool = False
    """A hint rollout (credit.hint_rollouts): its task's statement held the privileged context."""
    refined: bool = False
    """A refined rollout (credit.critique): its task's statement held a critique of a failed rollout."""
    teacher: bool = False
    """A hint rollout the run also trained as the teacher's own group (`credit.teacher_training`)."""


class Filters(Selection):
    """The list's query: `Selection`'s filters (task, status, reward range, ...) and two of training."""

    step: int | None = None
    policy_version: int | None = None

    def keep(self, t: Trajectory, row: TrajectoryRow) -> bool:
        return (
            self.matches(t)
            and (self.step is None or row.step == self.step)
            and (self.policy_version is None or row.policy_version == self.policy_version)
        )


class TurnView(_Out):
    kind: Literal["action", "summary"]
    text: str
    tool_call: ParsedCall | None
    parse_error: str | None
    observation: str | None
    observation_error: bool
    policy_version: int
    finish_reason: str
    start: int
    """Position of its first generated token in the segment's ids."""
    generated: int
    appended: int
    turn_credit: float | None = None
    """The bonus turn-level credit added to this turn's tokens' advantage (`credit.turn_weight`); None
    when the run gave none."""


class TokenView(_Out):
    """The segment's ids, position by position; log-probs and weights are None where the mask is 0."""

    ids: list[int]
    text: list[str] | None
    """Each id decoded on its own; None without a tokenizer."""
    mask: list[int]
    sampler_logprobs: list[float | None]
    learner_logprobs: list[float | None] | None
    """None when the learner did not record this segment (rollout runs, untrained rows)."""
    importance_weights: list[float | None] | None
    """exp(learner - sampler) per token."""
    teacher_logprobs: list[float | None] | None = None
    """The privileged teacher's log-prob of each model token (dense credit, issue 19); None without."""
    token_advantages: list[float | None] | None = None
    """The advantage each model token was trained with, where it was not the segment's for all."""


class SegmentView(_Out):
    index: int
    advantage: float
    advantage_source: Literal["learner", "group"]
    closed_by_summary: bool
    turns: list[TurnView]
    messages: list[dict[str, Any]]
    tokens: TokenView | None
    """None for chat policies, which keep messages instead of ids."""
    note: str | None = None


class CritiqueView(_Out):
    """A critique of a failed rollout (`credit.critique`, RUN/critiques.jsonl)."""

    step: int
    failed_id: str
    """The rollout the critic read."""
    index: int
    text: str
    refined_id: str | None
    """The refined rollout it started (None in `critique_mode: local`)."""


KEPT = {"step", "failed_id", "index", "text", "refined_id"}
"""What the view shows of a critiques.jsonl line (not its ids and log-probs)."""


class TrajectoryDetail(_Out):
    row: TrajectoryRow
    policy: str
    seed: int
    trainable: bool
    ids_verified: bool
    status_reason: str | None
    summaries: list[Summary]
    segments: list[SegmentView]
    final_diff: str
    grade: Grade | None
    metrics: TrajectoryMetrics
    timings: Timings
    critiques: list[CritiqueView] = Field(default_factory=list)
    """The critiques written of this rollout, each with the refined rollout it started."""
    critique_of: CritiqueView | None = None
    """For a refined rollout: the critique in its statement and the failed rollout it was written of."""


class GroupMember(_Out):
    row: TrajectoryRow
    final_diff: str
    grade: Grade | None
    last_text: str
    """The model's last message (usually its submit)."""


class GroupView(_Out):
    group_id: str
    task_id: str
    reward_mean: float
    members: list[GroupMember]


class Series(_Out):
    key: str
    points: list[tuple[float, float]]
    """(step, value); non-finite values are left out."""


class Plot(_Out):
    title: str
    series: list[Series]


class MetricsView(_Out):
    steps: int
    plots: list[Plot]


PLOTS: list[tuple[str, list[str]]] = [
    ("reward", ["reward_mean"]),
    ("pass rate", ["pass_rate"]),
    ("KL", ["approx_kl", "kl", "kl_ref"]),
    ("clip fraction", ["clip_fraction", "dual_clip_fraction"]),
    ("summaries per trajectory", ["summaries_per_trajectory"]),
]
"""Each plot's title and the metrics.jsonl keys it draws (those present)."""


# Reading the run ----------------------------------------------------------------------------------


def check_run(root: Path) -> None:
    if not root.is_dir():
        raise ViewerError(f"{root}: no such run directory")
    if not (root / "trajectories.jsonl").is_file():
        raise ViewerError(f"{root}: not a run directory (no trajectories.jsonl)")


@dataclass(frozen=True)
class Snapshot:
    """The trajectories and their rows, read together so that they always match."""

    trajectories: list[Trajectory]
    rows: list[TrajectoryRow]
    records: dict[tuple[str, int], SegmentAdvantage]


class RunView:
    """Answers the endpoints from the run's files, re-reading them only when they have changed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = RunStore(root)
        self.learner_path = root / LEARNER_FILE
        self.config_path = root / "config.yaml"
        self._cache: dict[str, tuple[tuple[tuple[int, int], ...], object]] = {}
        self._decoder = Decoder(find_tokenizer(root))

    def _read(self, name: str, paths: tuple[Path, ...], make: Callable[[], T]) -> T:
        """`make()`, recomputed when one of `paths` has changed since the last call."""
        key = tuple(file_version(path) for path in paths)
        cached = self._cache.get(name)
        if cached is not None and cached[0] == key:
            return cached[1]  # type: ignore[return-value]
        value = make()
        self._cache[name] = (key, value)
        return value

    def snapshot(self) -> Snapshot:
        paths = (self.store.trajectories_path, self.learner_path, self.config_path)
        return self._read("snapshot", paths, self._snapshot)

    def _snapshot(self) -> Snapshot:
        trajectories = list(self.store.trajectories())
        records = learner_records(self.root)
        first_record: dict[str, SegmentAdvantage] = {}
        for (trajectory_id, _), record in sorted(records.items()):
            first_record.setdefault(trajectory_id, record)
        training, taught = self.is_training(), self.source().teacher_trained()
        rows = [
            trajectory_row(t, advantage, first_record.get(t.id), training)
            for t, advantage in zip(trajectories, group_relative_advantages(trajectories), strict=True)
        ]
        rows = [row.model_copy(update={"teacher": row.hint and taught}) for row in rows]
        return Snapshot(trajectories=trajectories, rows=rows, records=records)

    def source(self) -> ModelSource:
        return self._read("config", (self.config_path,), lambda: read_model_source(self.config_path))

    def critiques(self) -> list[CritiqueView]:
        """The run's critiques (RUN/critiques.jsonl; none when it has none), re-read when it changes."""
        path = self.store.critiques_path

        def read() -> list[CritiqueView]:
            found = []
            for _, line in read_lines(path):
                try:
                    found.append(CritiqueLine.model_validate_json(line))
                except ValidationError:
                    continue  # a line of another schema: the view shows what it can read
            return [CritiqueView.model_validate(c.model_dump(include=KEPT)) for c in found]

        return self._read("critiques", (path,), read) if path.exists() else []

    def is_training(self) -> bool:
        return self.source().model is not None

    def rows(self, filters: Filters) -> list[TrajectoryRow]:
        snapshot = self.snapshot()
        pairs = zip(snapshot.trajectories, snapshot.rows, strict=True)
        return [row for t, row in pairs if filters.keep(t, row)]

    def info(self) -> RunInfo:
        rows = self.snapshot().rows
        return RunInfo(
            name=self.root.resolve().name,
            path=str(self.root.resolve()),
            kind="training" if self.is_training() else "rollouts",
            trajectories=len(rows),
            tokenizer=str(self._decoder.folder) if self._decoder.folder else None,
            tasks=sorted({r.task_id for r in rows}),
            statuses=sorted({r.status for r in rows}),
            steps=sorted({r.step for r in rows if r.step is not None}),
            policy_versions=sorted({r.policy_version for r in rows}),
        )

    def detail(self, trajectory_id: str) -> TrajectoryDetail | None:
        snapshot = self.snapshot()
        found = [
            (t, row)
            for t, row in zip(snapshot.trajectories, snapshot.rows, strict=True)
            if t.id == trajectory_id
        ]
        if not found:
            return None
        t, row = found[-1]
        turned = self.source().turn_credit()
        bonuses = trajectory_bonuses(t.segments, *turned) if turned else [None] * len(t.segments)
        segments = [
            self._segment(s, row, snapshot.records.get((t.id, s.index)), i + 1 < len(t.segments), bonuses[i])
            for i, s in enumerate(t.segments)
        ]
        critiques = self.critiques()  # read once for both sides
        return TrajectoryDetail(
            row=row, policy=t.policy, seed=t.seed, trainable=t.trainable, ids_verified=t.ids_verified,
            status_reason=t.status_reason, summaries=t.summaries, segments=segments,
            final_diff=t.final_diff, grade=t.grade, metrics=t.metrics, timings=t.timings,
            critiques=[c for c in critiques if c.failed_id == t.id],
            critique_of=next((c for c in critiques if c.refined_id == t.id), None),
        )  # fmt: skip

    def _segment(
        self,
        segment: Segment,
        row: TrajectoryRow,
        record: SegmentAdvantage | None,
        closed: bool,
        bonuses: list[float] | None,
    ) -> SegmentView:
        tokens, note = None, None
        if segment.prompt_ids or any(turn.generated_ids for turn in segment.turns):
            tokens, note = token_view(segment, record, self._decoder)
        return SegmentView(
            index=segment.index,
            advantage=record.advantage if record else row.advantage,
            advantage_source="learner" if record else row.advantage_source,
            closed_by_summary=closed,
            turns=turn_views(segment, bonuses),
            messages=segment.messages,
            tokens=tokens,
            note=note,
        )

    def group(self, group_id: str) -> GroupView | None:
        snapshot = self.snapshot()
        members = [
            GroupMember(row=row, final_diff=t.final_diff, grade=t.grade, last_text=last_text(t))
            for t, row in zip(snapshot.trajectories, snapshot.rows, strict=True)
            if t.group_id == group_id
        ]
        if not members:
            return None
        members.sort(key=lambda m: m.row.sample_index)
        return GroupView(
            group_id=group_id,
            task_id=members[0].row.task_id,
            reward_mean=sum(m.row.reward for m in members) / len(members),
            members=members,
        )

    def metrics(self) -> MetricsView:
        path = self.store.metrics_path
        lines = self._read("metrics", (path,), lambda: read_metrics(path))
        plots = [plot_of(title, keys, lines) for title, keys in PLOTS]
        return MetricsView(steps=len(lines), plots=[p for p in plots if p.series])


def trajectory_row(
    t: Trajectory, group_advantage: float, record: SegmentAdvantage | None, training: bool
) -> TrajectoryRow:
    return TrajectoryRow(
        id=t.id,
        task_id=t.task_id,
        group_id=t.group_id,
        sample_index=t.sample_index,
        policy_version=t.policy_version,
        step=record.step if record else (t.policy_version if training else None),
        reward=t.reward,
        advantage=record.advantage if record else group_advantage,
        advantage_source="learner" if record else "group",
        status=t.status,
        correct=t.grade.correct if t.grade else None,
        turns=t.metrics.turns,
        summaries=len(t.summaries),
        tokens=t.metrics.total_tokens,
        hint=t.task_id.endswith(HINT_SUFFIX),
        refined=t.task_id.endswith(CRITIQUE_SUFFIX),
    )


def file_version(path: Path) -> tuple[int, int]:
    """(mtime, size) of a file; (0, -1) when it does not exist."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return (0, -1)
    return (stat.st_mtime_ns, stat.st_size)


def learner_records(root: Path) -> dict[tuple[str, int], SegmentAdvantage]:
    """learner.jsonl by (trajectory id, segment); a later line for the same segment (a resumed step) wins."""
    return {(e.trajectory_id, e.segment): e for entries in advantages(root).values() for e in entries}


def read_metrics(path: Path) -> list[dict[str, float | None]]:
    return [METRICS_LINE.validate_json(line) for _, line in read_lines(path)]


def read_model_source(path: Path) -> ModelSource:
    if not path.is_file():
        return ModelSource()
    data = yaml.safe_load(path.read_text()) or {}
    return ModelSource.model_validate(data if isinstance(data, dict) else {})


def group_relative_advantages(trajectories: list[Trajectory]) -> list[float]:
    """r - mean(r) over each group's graded members (infra errors get 0), as the learner computes it."""
    if not trajectories:
        return []
    advantages, _ = group_advantages(
        torch.tensor([t.reward for t in trajectories], dtype=torch.float64),
        [t.group_id for t in trajectories],
        torch.tensor([t.status != "infra_error" for t in trajectories]),
    )
    return [float(a) for a in advantages.tolist()]


def turn_views(segment: Segment, bonuses: list[float] | None = None) -> list[TurnView]:
    """The segment's turns; with `bonuses`, each one's turn-level credit."""
    views = []
    position = len(segment.prompt_ids)
    for k, turn in enumerate(segment.turns):
        views.append(
            TurnView(
                kind=turn.kind,
                text=turn.text,
                tool_call=turn.tool_call,
                parse_error=turn.parse_error,
                observation=turn.observation,
                observation_error=turn.observation_error,
                policy_version=turn.policy_version,
                finish_reason=turn.finish_reason,
                start=position,
                generated=len(turn.generated_ids),
                appended=len(turn.appended_ids),
                turn_credit=bonuses[k] if bonuses is not None else None,
            )
        )
        position += len(turn.generated_ids) + len(turn.appended_ids)
    return views


def token_view(
    segment: Segment, record: SegmentAdvantage | None, decoder: Decoder
) -> tuple[TokenView, str | None]:
    """The segment's tokens with both log-probs and the importance weight on each model token."""
    ids, mask, sampler = segment.ids_and_mask()
    sampler_lp = [lp if m else None for lp, m in zip(sampler, mask, strict=True)]
    learner_lp: list[float | None] | None = None
    weights: list[float | None] | None = None
    note = None
    if record is not None and len(record.learner_logprobs) == sum(mask):
        learned = iter(record.learner_logprobs)
        learner_lp = [next(learned) if m else None for m in mask]
        weights = [importance_weight(s, lp) for s, lp in zip(sampler_lp, learner_lp, strict=True)]
    elif record is not None:
        note = (
            f"learner.jsonl has {len(record.learner_logprobs)} log-probs for this segment's "
            f"{sum(mask)} model tokens; they are not shown"
        )
    tokens = TokenView(
        ids=ids,
        text=decoder.decode(ids),
        mask=mask,
        sampler_logprobs=sampler_lp,
        learner_logprobs=learner_lp,
        importance_weights=weights,
        teacher_logprobs=on_model_tokens(record.teacher_logprobs if record else None, mask),
        token_advantages=on_model_tokens(record.token_advantages if record else None, mask),
    )
    return tokens, note


def on_model_tokens(values: list[float] | None, mask: list[int]) -> list[float | None] | None:
    """Values recorded for the model's tokens in order, laid out by position (None elsewhere); None when
    absent or not one per model token."""
    if values is None or len(values) != sum(mask):
        return None
    given = iter(values)
    return [next(given) if m else None for m in mask]


def importance_weight(sampler: float | None, learner: float | None) -> float | None:
    if sampler is None or learner is None:
        return None
    return math.exp(min(learner - sampler, 50.0))


def last_text(t: Trajectory) -> str:
    turns = [turn for segment in t.segments for turn in segment.turns]
    return turns[-1].text if turns else ""


def plot_of(title: str, keys: list[str], lines: list[dict[str, float | None]]) -> Plot:
    series = []
    for key in keys:
        points = [
            (float(i if (step := line.get("step")) is None else step), value)
            for i, line in enumerate(lines)
            if (value := line.get(key)) is not None and math.isfinite(value)
        ]
        if points:
            series.append(Series(key=key, points=points))
    return Plot(title=title, series=series)


# Token text ---------------------------------------------------------------------------------------

CHECKPOINT = re.compile(r"step-(\d+)")


def find_tokenizer(root: Path) -> Path | None:
    """The run's model folder (config.yaml), else its latest checkpoint's, if it holds a tokenizer."""
    source = read_model_source(root / "config.yaml")
    candidates = []
    if source.model:
        candidates.append(Path(source.model))
    if source.policy and source.policy.startswith("hf:"):
        candidates.append(Path(source.policy.removeprefix("hf:")))
    if source.policy and source.policy.startswith("tito:"):  # `harness serve` names a model by its folder
        candidates.append(Path(source.policy.removeprefix("tito:").rpartition("@")[0]))
    candidates += [c / "model" for c in checkpoints_newest_first(root / "checkpoints")]
    return next((c for c in candidates if has_tokenizer(c)), None)


def checkpoints_newest_first(folder: Path) -> list[Path]:
    found = [(int(m.group(1)), p) for p in folder.glob("step-*") if (m := CHECKPOINT.fullmatch(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def has_tokenizer(folder: Path) -> bool:
    return (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file()


def load_tokenizer(folder: Path) -> Any:
    """The tokenizer in `folder`, or None when it cannot be loaded."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError) as e:
        log.warning("harness view: cannot load the tokenizer in %s (%s); showing token ids only", folder, e)
        return None


class Decoder:
    """Decodes single ids with the run's tokenizer, loaded on first use; ids only without one."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._tokenizer: Any = None
        self._lock = threading.Lock()
        self._texts: dict[int, str] = {}

    def decode(self, ids: list[int]) -> list[str] | None:
        if self.folder is None:
            return None
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = load_tokenizer(self.folder)
            if self._tokenizer is None:  # unreadable: ids only from now on
                self.folder = None
                return None
            new = sorted(set(ids) - self._texts.keys())
            if new:
                texts = self._tokenizer.batch_decode([[i] for i in new], skip_special_tokens=False)
                self._texts.update(zip(new, texts, strict=True))
        return [self._texts[i] for i in ids]


# The app ------------------------------------------------------------------------------------------


def create_app(root: Path) -> FastAPI:
    check_run(root)
    view = RunView(root)
    app = FastAPI(title="harness view", docs_url=None, redoc_url=None, openapi_url=None)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/api/run")
    def run_info() -> RunInfo:
        return view.info()

    @app.get("/api/trajectories")
    def trajectories(filters: Annotated[Filters, Query()]) -> list[TrajectoryRow]:
        return view.rows(filters)

    @app.get("/api/trajectories/{trajectory_id:path}")
    def trajectory(trajectory_id: str) -> TrajectoryDetail:
        return found(view.detail(trajectory_id), f"no trajectory {trajectory_id!r} in this run")

    @app.get("/api/groups/{group_id:path}")
    def group(group_id: str) -> GroupView:
        return found(view.group(group_id), f"no group {group_id!r} in this run")

    @app.get("/api/metrics")
    def metrics() -> MetricsView:
        return view.metrics()

    return app


def found(value: T | None, missing: str) -> T:
    if value is None:
        raise HTTPException(status_code=404, detail=missing)
    return value


def bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as e:
        sock.close()
        raise ViewerError(f"cannot listen on {HOST}:{port}: {e.strerror}") from e
    # Listening before the URL is announced: a client that connects at once waits in the backlog until
    # the server accepts, instead of being refused while uvicorn is still starting.
    sock.listen(128)
    return sock


def serve_viewer(root: Path, port: int, on_ready: Callable[[str], None]) -> None:
    """Serves the viewer of `root` on 127.0.0.1:`port` (0: a free port) until interrupted."""
    app = create_app(root)
    sock = bind(port)
    on_ready(f"http://{HOST}:{sock.getsockname()[1]}/")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    server.run(sockets=[sock])
