"""A token policy that plays scripted fixes as a real model's tokens: training runs that are the same on
every machine.

A tiny model trained from random weights samples differently on different CPUs (their floating-point
paths differ), so a run that must hold varied rewards, summaries and advantages of both signs cannot rely
on what a model happens to sample. `ScriptedTokens` writes, instead of sampling, what `scripted:gold-min`
or `scripted:decoy` would answer (the right one-place fix, or the same place edited wrongly), as ids of
the model's tokenizer ending with its stop id, and reports the model's own log-probs of those ids (one
teacher-forced pass, as the learner computes them). Which script an episode plays comes from its seed
alone, so ids, tool calls, rewards and advantages are identical everywhere; only the log-probs carry
the machine's rounding. The learner trains on these tokens like on sampled ones (`harness train` with
`script: gold-or-decoy`).

An episode's plan, from a hash of its seed: the gold fix in half of the episodes, the decoy in the other
half; in a quarter of them the first message has no tool call (a parse error the episode recovers from).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

from harness.agent.conversation import SEEDS_PER_EPISODE
from harness.agent.parsing import TOOL_CALL
from policies.base import Generation, SamplingParams, Tokenizer
from policies.chat_format import ChatFormat, assistant_text
from policies.hf import HFPolicy, sequence_logprobs
from policies.scripted import STEP_MARK, ScriptedPolicy
from summarizer import request_message
from tasks.model import Task

STUMBLE = "I will look at the failing function first."
"""The first message of a stumbling episode: no tool call, so the loop answers with a parse error."""


@dataclass(frozen=True)
class Plan:
    script: Literal["gold-min", "decoy"]
    stumble: bool


def plan_of(episode_seed: int) -> Plan:
    """The episode's plan, the same on every machine (a hash of the seed, not a random generator)."""
    digest = hashlib.blake2b(str(episode_seed).encode(), digest_size=2).digest()
    return Plan(script="gold-min" if digest[0] % 2 == 0 else "decoy", stumble=digest[1] % 4 == 0)


@dataclass(frozen=True)
class Reading:
    """What a prompt says about its episode: the task, the script steps taken, what is asked now."""

    task: Task
    done: int
    summarizing: bool
    first: bool
    """No assistant message yet in the whole episode."""


class ScriptedTokens:
    """Matches `policies.base.TokenPolicy`; wraps the `HFPolicy` being trained (its tokenizer, weights and
    version). In-process and synchronous only: log-probs come from the weights as they are when asked."""

    kind: Literal["token"] = "token"

    def __init__(self, policy: HFPolicy, tasks: list[Task]) -> None:
        self.policy = policy
        self.spec = f"scripted-tokens:gold-or-decoy@{policy.spec}"
        self.tokenizer: Tokenizer = policy.tokenizer
        self.tasks = tasks
        self.format = ChatFormat(policy.tokenizer, policy.stop_ids())
        self.opening = self._text(self.format.reply_ids)
        self.stop_text = self._text(policy.stop_ids()[:1])
        self.request = self._text(self.format.message_ids(request_message()))
        self.scripts = {name: ScriptedPolicy(name) for name in ("gold-min", "decoy")}

    @property
    def version(self) -> int:
        return self.policy.version

    def stop_ids(self) -> list[int]:
        return self.policy.stop_ids()

    def _text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    @staticmethod
    def _opening(task: Task) -> str:
        """How `task.prompt()` opens: its title and statement."""
        return f"# {task.title}\n\n{task.problem_statement.strip()}\n\n"

    def read(self, prompt_ids: list[int]) -> Reading:
        """The episode's state from the ids so far: each assistant message opens with `opening`; a
        segment after a summary starts from the step the summary recorded."""
        text = self._text(prompt_ids)
        chunks = text.split(self.opening)
        if len(chunks) < 2 or chunks[-1]:
            raise ValueError("the prompt does not end where an assistant message starts")
        task = next((t for t in self.tasks if t.prompt() in chunks[0]), None)
        if task is None:  # a refined task (harness/training/critique.py): the statement, then a critique
            task = next((t for t in self.tasks if self._opening(t) in chunks[0]), None)
        if task is None:
            raise ValueError("the prompt holds none of the tasks' statements")
        marks = STEP_MARK.findall(chunks[0])
        resumed = int(marks[-1]) if marks else 0
        replies = [chunk.split(self.stop_text)[0] for chunk in chunks[1:-1]]
        calls = sum(1 for reply in replies if TOOL_CALL.search(reply))
        summarizing = text.endswith(self.request)
        return Reading(task, resumed + calls, summarizing, first=not replies and not marks)

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        if params.seed is None:
            raise ValueError("a scripted token policy needs the episode's generation seed")
        plan = plan_of(params.seed // SEEDS_PER_EPISODE)
        reading = self.read(prompt_ids)
        if plan.stumble and reading.first and not reading.summarizing:
            text = STUMBLE
        else:
            reply = self.scripts[plan.script].reply(reading.task, reading.done, reading.summarizing)
            calls = [{"function": {"name": c.name, "arguments": c.arguments}} for c in reply.tool_calls]
            text = assistant_text({"content": reply.content, "tool_calls": calls})
        ids = [*self.format.encode(text), self.policy.stop_ids()[0]]
        finish: Literal["stop", "length"] = "stop"
        if len(ids) > params.max_new_tokens:
            ids, finish = ids[: params.max_new_tokens], "length"
        logprobs = sequence_logprobs(
            self.policy.model, [*prompt_ids, *ids], len(prompt_ids), params.temperature
        )
        return Generation(ids=ids, logprobs=logprobs, finish_reason=finish, policy_version=self.version)
