"""`harness export`: every format loads with `datasets.load_dataset`, row for row, filters included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets

from harness.rollouts.store import RunStore
from summarizer import REQUEST
from tests.conftest import require_backend
from tests.harness.inspection.test_replay import harness, rollout


def load(kind: str, path: Path, cache: Path) -> datasets.Dataset:
    loaded = datasets.load_dataset(kind, data_files=str(path), split="train", cache_dir=str(cache))
    assert isinstance(loaded, datasets.Dataset)
    return loaded


def export(run: Path, out: Path, *args: str) -> None:
    proc = harness("export", str(run), "--out", str(out), *args)
    assert proc.returncode == 0, proc.stderr
    assert f"to {out}" in proc.stdout


def test_jsonl_and_parquet_hold_one_row_per_trajectory(scripted_training_run: Path, tmp_path: Path) -> None:
    run = scripted_training_run
    trajectories = list(RunStore(run).trajectories())
    for kind, fmt in (("json", "jsonl"), ("parquet", "parquet")):
        out = tmp_path / f"all.{fmt}"
        export(run, out, "--format", fmt)
        rows = load(kind, out, tmp_path / "hf")
        assert rows.num_rows == len(trajectories)
        assert rows["id"] == [t.id for t in trajectories]
        assert rows["reward"] == [t.reward for t in trajectories]
        assert rows["summaries"] == [t.metrics.summaries for t in trajectories]
        assert rows["final_diff"] == [t.final_diff for t in trajectories]
        first = json.loads(rows[0]["trajectory"])
        assert first["segments"][0]["prompt_ids"] == trajectories[0].segments[0].prompt_ids

    solved = [t for t in trajectories if t.reward >= 1.0]
    export(run, tmp_path / "solved.parquet", "--format", "parquet", "--min-reward", "1")
    assert load("parquet", tmp_path / "solved.parquet", tmp_path / "hf")["id"] == [t.id for t in solved]
    limited = [t for t in trajectories if t.status == "limit"]
    if limited:
        export(run, tmp_path / "limit.jsonl", "--status", "limit")
        assert load("json", tmp_path / "limit.jsonl", tmp_path / "hf").num_rows == len(limited)


def test_sft_rebuilds_the_conversations_of_token_trajectories(
    scripted_training_run: Path, tmp_path: Path
) -> None:
    run = scripted_training_run
    solved = [t for t in RunStore(run).trajectories() if t.reward >= 1.0]
    out = tmp_path / "sft.jsonl"
    export(run, out, "--format", "sft", "--min-reward", "1")
    rows = load("json", out, tmp_path / "hf")
    assert rows.num_rows == sum(len(t.segments) for t in solved)  # one conversation per segment
    first: list[dict[str, Any]] = rows[0]["messages"]
    t = solved[0]
    assert [m["role"] for m in first[:2]] == ["system", "user"]
    assert first[1]["content"].startswith("# ")  # the task's title
    assert first[2] == {"role": "assistant", "content": t.segments[0].turns[0].text}
    if t.summaries:  # the segment ends with the summary request and the summary; the next opens with it
        assert first[-2] == {"role": "user", "content": REQUEST}
        assert first[-1] == {"role": "assistant", "content": t.summaries[0].text}
        assert t.summaries[0].text.strip() in rows[1]["messages"][1]["content"]
    assert all(m["role"] == "assistant" for m in (row["messages"][-1] for row in rows))


def test_sft_writes_chat_tool_calls_as_the_model_writes_them(tmp_path: Path) -> None:
    require_backend("bwrap")
    (trajectory,) = rollout(tmp_path / "gold", "scripted:gold")
    export(tmp_path / "gold", tmp_path / "sft.jsonl", "--format", "sft")
    (row,) = load("json", tmp_path / "sft.jsonl", tmp_path / "hf")
    messages = row["messages"]
    assert [m["role"] for m in messages] == ["system", "user", *["assistant", "tool"] * 4, "assistant"]
    edit = messages[6]["content"]
    assert edit.startswith("Step 3: edit.\n<tool_call>\n") and edit.endswith("</tool_call>")
    assert json.loads(edit.split("<tool_call>\n")[1].split("\n</tool_call>")[0])["name"] == "edit"
    assert messages[7]["content"].startswith("edited mini/__init__.py")
    assert '"name": "submit"' in messages[-1]["content"]
    assert trajectory.grade is not None and trajectory.grade.correct == 1.0

    proc = harness("export", str(tmp_path / "gold"), "--min-reward", "2")
    assert proc.returncode == 2 and "nothing to export" in proc.stderr
    for fmt, name in (("jsonl", "trajectories.jsonl"), ("parquet", "trajectories.parquet")):
        proc = harness("export", str(tmp_path / "gold"), "--format", fmt)  # into the run by default
        assert proc.returncode == 0 and (tmp_path / "gold" / "export" / name).is_file(), proc.stderr


def test_sft_tools_rows_take_native_tool_calls_and_the_episodes_tools(
    scripted_training_run: Path, tmp_path: Path, tiny_policy: Any
) -> None:
    """`--format sft-tools`: TRL's tool-calling form. Token trajectories (the training run) and chat ones
    (a scripted rollout) both give assistant `tool_calls` with object arguments, tool messages answering
    them, and the tools column; a chat template renders a row back into the model's own call format."""
    require_backend("bwrap")
    rollout(tmp_path / "gold", "scripted:gold")
    for run, name in ((scripted_training_run, "token"), (tmp_path / "gold", "chat")):
        out = tmp_path / f"{name}.jsonl"
        export(run, out, "--format", "sft-tools", "--min-reward", "1")
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert rows and all(set(row) == {"messages", "tools"} for row in rows)
        names = {tool["function"]["name"] for tool in rows[0]["tools"]}
        assert {"edit", "submit"} <= names  # the task's own tools (a demo task allows only these)
        messages = rows[0]["messages"]
        calls = [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]
        assert calls and all(isinstance(m["tool_calls"][0]["function"]["arguments"], dict) for m in calls)
        answered = {m["tool_calls"][0]["id"] for m in calls}
        assert {m["tool_call_id"] for m in messages if m["role"] == "tool"} <= answered
        assert "<tool_call>" not in json.dumps(
            [m.get("content", "") for m in calls]
        )  # the call is not text too
        text = tiny_policy.tokenizer.apply_chat_template(messages, tools=rows[0]["tools"], tokenize=False)
        first = calls[0]["tool_calls"][0]["function"]
        assert f'"name": "{first["name"]}"' in text and '"name": "submit"' in text  # the tools, rendered
        assert load("json", out, tmp_path / f"hf-{name}").num_rows == len(rows)  # datasets reads it
