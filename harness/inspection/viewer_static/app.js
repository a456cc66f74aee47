// harness view: a single-page viewer of one run directory. Routes (in the URL's hash):
//   #/?task=..&status=..   the trajectory list, filtered
//   #/t/ID                 one trajectory: grade, diff, conversation by segments, token view
//   #/g/GROUP              a group's rollouts side by side
//   #/plots                training metrics per step
// Every view is built from the JSON endpoints of harness/inspection/viewer.py; data is inserted as text, never as HTML.
"use strict";

const app = document.getElementById("app");
const SVG_NS = "http://www.w3.org/2000/svg";
const SERIES_COLORS = ["#0969da", "#bf3989", "#1a7f37", "#9a6700"];
let renderCount = 0;

// DOM helpers --------------------------------------------------------------------------------------

function build(node, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function el(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

async function getJSON(path) {
  const response = await fetch(path);
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      message = (await response.json()).detail || message;
    } catch (_) {
      // not JSON: keep the status line
    }
    throw new Error(message);
  }
  return response.json();
}

function fmt(x, digits = 3) {
  return x === null || x === undefined ? "—" : Number(x).toFixed(digits);
}

function signed(x, digits = 3) {
  return x === null || x === undefined ? "—" : (x > 0 ? "+" : "") + Number(x).toFixed(digits);
}

function advClass(advantage) {
  return advantage > 0 ? "adv-pos" : advantage < 0 ? "adv-neg" : "adv-zero";
}

function trajectoryLink(id, text) {
  return el("a", { href: "#/t/" + encodeURIComponent(id), class: "traj-link" }, text || id);
}

function groupLink(id) {
  return el("a", { href: "#/g/" + encodeURIComponent(id), class: "group-link" }, id);
}

// Routing ------------------------------------------------------------------------------------------

function route() {
  const [path, query] = (location.hash.slice(1) || "/").split("?");
  if (path.startsWith("/t/")) return trajectoryPage(decodeURIComponent(path.slice(3)));
  if (path.startsWith("/g/")) return groupPage(decodeURIComponent(path.slice(3)));
  if (path === "/plots") return plotsPage();
  return listPage(new URLSearchParams(query || ""));
}

async function render() {
  const mine = ++renderCount;
  let content;
  try {
    content = await route();
  } catch (error) {
    content = el("p", { class: "error" }, "error: " + error.message);
  }
  if (mine === renderCount) app.replaceChildren(content);
}

async function start() {
  try {
    const run = await getJSON("/api/run");
    document.getElementById("run-name").textContent = `${run.name} · ${run.kind} · ${run.path}`;
    document.title = `harness view · ${run.name}`;
  } catch (error) {
    document.getElementById("run-name").textContent = "error: " + error.message;
  }
  document.getElementById("reload").addEventListener("click", render);
  window.addEventListener("hashchange", render);
  await render();
}

// The list -----------------------------------------------------------------------------------------

const SELECT_FILTERS = [
  ["task", "task", "tasks"],
  ["status", "status", "statuses"],
  ["step", "step", "steps"],
  ["policy_version", "policy version", "policy_versions"],
];

async function listPage(params) {
  const [run, rows] = await Promise.all([
    getJSON("/api/run"),
    getJSON("/api/trajectories?" + params.toString()),
  ]);
  const form = filterForm(run, params);
  const meanReward = rows.length ? rows.reduce((s, r) => s + r.reward, 0) / rows.length : null;
  const count = el(
    "p",
    { id: "list-count" },
    `${rows.length} of ${run.trajectories} trajectories · mean reward ${fmt(meanReward)}`,
  );
  return el("div", {}, form, count, trajectoryTable(rows));
}

function filterForm(run, params) {
  const controls = SELECT_FILTERS.map(([name, label, key]) =>
    el(
      "label",
      {},
      label,
      el(
        "select",
        { name, id: "filter-" + name },
        el("option", { value: "" }, "all"),
        run[key].map((value) =>
          el("option", { value, selected: params.get(name) === String(value) }, value),
        ),
      ),
    ),
  );
  for (const [name, label] of [["min_reward", "reward ≥"], ["max_reward", "reward ≤"]]) {
    controls.push(
      el("label", {}, label,
        el("input", { type: "number", step: "0.05", name, id: "filter-" + name, value: params.get(name) })),
    );
  }
  const clear = el("a", { href: "#/", id: "filter-clear" }, "clear filters");
  const form = el("form", { id: "filters", class: "filters" }, controls, clear);
  form.addEventListener("change", () => applyFilters(form));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    applyFilters(form);
  });
  return form;
}

function applyFilters(form) {
  const params = new URLSearchParams();
  for (const control of form.querySelectorAll("select, input")) {
    if (control.value !== "") params.set(control.name, control.value);
  }
  location.hash = "#/?" + params.toString();
}

function hintBadge() {
  return el("span", { class: "badge hint", title: "a hint rollout: the task's statement held its privileged context" }, "hint");
}

function refinedBadge() {
  return el("span", { class: "badge hint", title: "a refined rollout: the task's statement held a critique of a failed rollout" }, "refined");
}

function teacherBadge() {
  return el("span", { class: "badge hint", title: "also trained as the teacher's own group (credit.teacher_training)" }, "teacher");
}

function taskBadge(r) {
  if (r.hint) return r.teacher ? el("span", {}, hintBadge(), teacherBadge()) : hintBadge();
  return r.refined ? refinedBadge() : null;
}

// Critiques (credit.critique): those written of this rollout, each beside the refined rollout it started;
// on a refined rollout, the critique its statement held and the failed rollout it was written of.
function critiquesBlock(t) {
  const items = t.critiques.map((c) => el("div", { class: "critique", "data-index": c.index },
    el("div", { class: "muted" }, `critique ${c.index} (step ${c.step})`,
      c.refined_id ? el("span", {}, " → refined rollout ", trajectoryLink(c.refined_id)) : " (local: no refined rollout)"),
    el("pre", { class: "critique-text" }, c.text)));
  if (t.critique_of) {
    const c = t.critique_of;
    items.unshift(el("div", { class: "critique critique-of" },
      el("div", { class: "muted" }, "refines ", trajectoryLink(c.failed_id), `, under critique ${c.index}:`),
      el("pre", { class: "critique-text" }, c.text)));
  }
  if (!items.length) return null;
  return el("section", { class: "block", id: "critiques" }, el("h3", {}, "critiques"), items);
}

function trajectoryTable(rows) {
  const head = ["trajectory", "task", "group", "sample", "policy v.", "step", "status", "reward",
    "advantage", "correct", "turns", "summaries", "tokens"];
  const body = rows.map((r) =>
    el("tr", { class: "traj-row", "data-id": r.id, "data-task": r.task_id },
      el("td", {}, trajectoryLink(r.id)),
      el("td", { class: "task" }, r.task_id, taskBadge(r)),
      el("td", {}, groupLink(r.group_id)),
      el("td", { class: "num" }, r.sample_index),
      el("td", { class: "num" }, r.policy_version),
      el("td", { class: "num" }, r.step ?? "—"),
      el("td", { class: "status-" + r.status }, r.status),
      el("td", { class: "num reward" }, fmt(r.reward)),
      el("td", { class: "num" }, el("span", { class: "chip " + advClass(r.advantage) }, signed(r.advantage))),
      el("td", { class: "num" }, fmt(r.correct, 2)),
      el("td", { class: "num" }, r.turns),
      el("td", { class: "num" }, r.summaries),
      el("td", { class: "num" }, r.tokens),
    ),
  );
  return el("table", { class: "grid", id: "trajectories" },
    el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, body),
  );
}

// A trajectory -------------------------------------------------------------------------------------

async function trajectoryPage(id) {
  const t = await getJSON("/api/trajectories/" + encodeURIComponent(id));
  const r = t.row;
  const meta = [
    ["task", taskBadge(r) ? el("span", {}, r.task_id, taskBadge(r)) : r.task_id], ["group", groupLink(r.group_id)],
    ["sample", r.sample_index],
    ["policy", t.policy], ["policy version", r.policy_version], ["step", r.step ?? "—"],
    ["status", r.status + (t.status_reason ? ` (${t.status_reason})` : "")],
    ["reward", fmt(r.reward)],
    ["advantage", el("span", { class: "chip " + advClass(r.advantage) },
      `${signed(r.advantage)} (${r.advantage_source === "learner" ? "learner" : "group-relative"})`)],
    ["correct", fmt(r.correct, 2)], ["turns", r.turns], ["summaries", r.summaries],
    ["tokens", r.tokens], ["seed", t.seed], ["trainable", String(t.trainable)], ["ids verified", String(t.ids_verified)],
    ["duration", fmt(t.timings.duration_s, 1) + " s"],
  ];
  return el("div", { id: "trajectory", "data-id": t.row.id },
    el("h2", {}, "trajectory ", el("span", { class: "mono" }, r.id)),
    el("div", { class: "meta" }, meta.map(([k, v]) => el("div", {}, el("span", {}, k), el("span", {}, v)))),
    gradeBlock(t.grade),
    critiquesBlock(t),
    el("section", { class: "block" }, el("h3", {}, "final diff"), diffView(t.final_diff)),
    conversationBlock(t),
    tokensBlock(t),
  );
}

function gradeBlock(grade) {
  const section = el("section", { class: "block", id: "grade" }, el("h3", {}, "grade"));
  if (!grade) return build(section, {}, [el("p", { class: "muted" }, "not graded")]);
  const rows = [];
  for (const [kind, outcomes] of [["FAIL_TO_PASS", grade.fail_to_pass], ["PASS_TO_PASS", grade.pass_to_pass]]) {
    for (const [name, outcome] of Object.entries(outcomes)) {
      rows.push(el("tr", {}, el("td", { class: "mono" }, name), el("td", {}, kind),
        el("td", { class: outcome === "passed" ? "" : "error" }, outcome)));
    }
  }
  const notes = [
    `correct ${fmt(grade.correct, 2)} · reward ${fmt(grade.reward)} · patch ${grade.patch_applied ? "applied" : "not applied"}`,
    grade.apply_error && `apply error: ${grade.apply_error}`,
    grade.infra_error && `infra error: ${grade.infra_error}`,
    grade.dropped_paths.length ? `ignored paths: ${grade.dropped_paths.join(", ")}` : null,
    grade.simplicity && `simplicity penalty ${fmt(grade.simplicity.penalty)}`,
    ...(grade.tampering || []).map((t) => `tampering: ${t}`),
    ...(grade.suspicion || []).map((s) => `suspicious: ${s}`),
  ].filter(Boolean);
  return build(section, {}, [
    notes.map((n) => el("p", {}, n)),
    el("table", { class: "grid" },
      el("thead", {}, el("tr", {}, el("th", {}, "test"), el("th", {}, "kind"), el("th", {}, "outcome"))),
      el("tbody", {}, rows)),
  ]);
}

function diffView(diff) {
  if (!diff) return el("p", { class: "muted" }, "no changes");
  const lines = diff.split("\n").map((line) => {
    const kind = line.startsWith("+++") || line.startsWith("---") ? "file"
      : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : "";
    return el("span", { class: kind }, line + "\n");
  });
  return el("pre", { class: "diff" }, lines);
}

function summaryBoundary(t, segmentIndex) {
  const summary = t.summaries.find((s) => s.segment === segmentIndex);
  const text = summary
    ? `segment ${segmentIndex} closed by a self-summary at ${summary.tokens_before} tokens; ` +
      `segment ${segmentIndex + 1} starts from system + task + summary (${summary.tokens_after} tokens)`
    : `segment ${segmentIndex} closed; segment ${segmentIndex + 1} starts`;
  return el("div", { class: "summary-boundary segment-end", "data-segment": segmentIndex }, "⟦ summary ⟧ " + text);
}

function conversationBlock(t) {
  const section = el("section", { class: "block", id: "conversation" }, el("h3", {}, "conversation by segments"));
  for (const segment of t.segments) {
    const box = el("div", { class: "segment", "data-segment": segment.index },
      el("h3", {}, `segment ${segment.index}`,
        el("span", { class: "chip " + advClass(segment.advantage) }, "advantage " + signed(segment.advantage))));
    for (const message of segment.messages) {
      box.append(el("div", { class: "turn" }, el("div", { class: "turn-head" }, message.role),
        el("pre", {}, typeof message.content === "string" ? message.content : JSON.stringify(message.content))));
    }
    segment.turns.forEach((turn, k) => box.append(turnView(turn, k)));
    section.append(box);
    if (segment.closed_by_summary) section.append(summaryBoundary(t, segment.index));
  }
  return section;
}

// Turn-level credit (credit.turn_weight): the bonus a turn's tokens got from the change its edits made in
// the agent's own visible test runs; the turn is shaded by its sign.
function turnCreditChip(credit) {
  if (credit === null || credit === undefined) return null;
  return el("span", { class: "chip turn-credit " + advClass(credit),
    title: "turn-level credit: the change in the visible tests' pass rate this turn's edits made, as the agent's next run of them showed" },
    "turn credit " + signed(credit));
}

function turnView(turn, k) {
  const summary = turn.kind === "summary";
  const head = el("div", { class: "turn-head" },
    `turn ${k} · ${turn.kind} · policy version ${turn.policy_version} · ${turn.generated} tokens generated · finish ${turn.finish_reason}`,
    summary ? el("span", { class: "badge summary" }, "summary") : null,
    turnCreditChip(turn.turn_credit));
  const credited = turn.turn_credit ? " credited " + advClass(turn.turn_credit) : "";
  return el("div", { class: "turn" + (summary ? " summary-turn" : "") + credited }, head,
    el("pre", { class: "model-text" }, turn.text),
    turn.tool_call && el("pre", { class: "tool-call" }, "→ " + turn.tool_call.name + " " + JSON.stringify(turn.tool_call.arguments)),
    turn.parse_error && el("pre", { class: "error" }, "parse error: " + turn.parse_error),
    turn.observation !== null && el("pre", { class: "observation" + (turn.observation_error ? " error" : "") }, turn.observation),
  );
}

// The token view -----------------------------------------------------------------------------------

const SHADES = {
  advantage: "advantage (loss-mask-1 tokens)",
  weight: "importance weight exp(learner − sampler)",
  sampler: "sampler log-prob",
  gap: "teacher − student gap (dense credit)",
};

function tokensBlock(t) {
  const section = el("section", { class: "block", id: "tokens" }, el("h3", {}, "tokens"));
  if (!t.segments.some((s) => s.tokens)) {
    return build(section, {}, [el("p", { class: "muted" }, "no token ids (a chat or scripted policy keeps messages only)")]);
  }
  const info = el("div", { class: "token-info", id: "token-info" }, "hover a token: its id, loss mask, advantage, log-probs and importance weight");
  const body = el("div", {});
  const select = el("select", { id: "shade-by" },
    Object.entries(SHADES).map(([value, label]) => el("option", { value }, "shade by " + label)));
  const hidePrompts = el("input", { type: "checkbox", id: "hide-prompts" });
  const key = el("div", { id: "token-legend" });
  const draw = () => {
    body.replaceChildren(...tokenSegments(t, select.value, hidePrompts.checked, info));
    key.replaceChildren(legend(select.value));  // the colours of the shading shown, not another's
  };
  select.addEventListener("change", draw);
  hidePrompts.addEventListener("change", draw);
  draw();
  const controls = el("div", { class: "token-controls" }, select,
    el("label", {}, hidePrompts, " fold the prompts"), key);
  // The controls ride with the hover details at the foot of the window: nothing covers them.
  const bar = el("div", { class: "token-bar" }, controls, info);
  return build(section, {}, [body, bar]);
}

function legend(shade) {
  const sample = (cls, style, text) => el("span", { class: "tok " + cls, style }, text);
  const masked = sample("m0", null, "loss mask 0: prompt, tool results, inserted");
  const summary = sample("m1 summary-tok", null, "self-summary");
  const items = {
    advantage: [
      sample("m1 adv-pos", `background: ${advantageColor(0.5)}`, "mask 1, advantage > 0"),
      sample("m1 adv-neg", `background: ${advantageColor(-0.5)}`, "mask 1, advantage < 0"),
      sample("m1 adv-zero", `background: ${advantageColor(0)}`, "mask 1, advantage 0"),
    ],
    weight: [
      sample("m1", `background: ${weightColor(1.2)}`, "importance weight > 1 (the learner more likely)"),
      sample("m1", `background: ${weightColor(0.8)}`, "weight < 1"),
      sample("m1", `background: ${weightColor(null)}`, "no learner log-prob"),
    ],
    sampler: [
      sample("m1", `background: ${samplerColor(-0.1)}`, "sampler log-prob near 0 (expected)"),
      sample("m1", `background: ${samplerColor(-4)}`, "sampler log-prob -4 or less (surprising)"),
    ],
    gap: [
      sample("m1", `background: ${gapColor(1)}`, "the teacher, shown the reference, finds the token likelier"),
      sample("m1", `background: ${gapColor(-1)}`, "the teacher finds it less likely"),
      sample("m1", `background: ${gapColor(null)}`, "not scored by a teacher"),
    ],
  }[shade];
  return el("div", { class: "legend", "data-shade": shade }, masked, ...items, summary);
}

function advantageColor(advantage) {
  if (advantage === 0) return "rgba(100, 116, 139, 0.22)";
  const alpha = 0.2 + 0.5 * Math.min(1, Math.abs(advantage));
  return advantage > 0 ? `rgba(22, 163, 74, ${alpha})` : `rgba(220, 38, 38, ${alpha})`;
}

function weightColor(weight) {
  if (weight === null) return "rgba(100, 116, 139, 0.22)";
  const logW = Math.log(weight);
  const alpha = 0.1 + 0.7 * Math.min(1, Math.abs(logW) / 0.2);
  return logW >= 0 ? `rgba(37, 99, 235, ${alpha})` : `rgba(234, 88, 12, ${alpha})`;
}

function gapColor(gap) {
  if (gap === null) return "rgba(100, 116, 139, 0.22)";
  const alpha = 0.1 + 0.7 * Math.min(1, Math.abs(gap));
  return gap >= 0 ? `rgba(13, 148, 136, ${alpha})` : `rgba(190, 24, 93, ${alpha})`;
}

function tokenGap(tok, i) {
  const teacher = tok.teacher_logprobs ? tok.teacher_logprobs[i] : null;
  return teacher === null ? null : teacher - tok.sampler_logprobs[i];
}

function tokenAdvantage(segment, i) {
  const own = segment.tokens.token_advantages ? segment.tokens.token_advantages[i] : null;
  return own === null ? segment.advantage : own;
}

function samplerColor(logprob) {
  return `rgba(147, 51, 234, ${0.05 + 0.75 * Math.min(1, -logprob / 4)})`;
}

function tokenSegments(t, shade, hidePrompts, info) {
  const out = [];
  for (const segment of t.segments) {
    out.push(el("h3", {}, `segment ${segment.index} · advantage ${signed(segment.advantage)}` +
      (segment.tokens && !segment.tokens.learner_logprobs ? " · learner log-probs absent" : "")));
    if (segment.note) out.push(el("p", { class: "muted" }, segment.note));
    if (!segment.tokens) {
      out.push(el("p", { class: "muted" }, "no token ids in this segment"));
      continue;
    }
    out.push(segmentTokens(segment, shade, hidePrompts, info));
    if (segment.closed_by_summary) out.push(summaryBoundary(t, segment.index));
  }
  return out;
}

function turnOfPosition(segment) {
  // For each token position: the index of its turn, or -1 in the prompt / appended ids.
  const owner = new Array(segment.tokens.ids.length).fill(-1);
  segment.turns.forEach((turn, k) => owner.fill(k, turn.start, turn.start + turn.generated));
  return owner;
}

function tokenTitle(segment, i, turn) {
  const tok = segment.tokens;
  const text = tok.text ? JSON.stringify(tok.text[i]) : "";
  const lines = [`token ${tok.ids[i]} ${text} · position ${i}`];
  if (!tok.mask[i]) {
    lines.push("loss mask 0 (prompt, tool result or inserted by the harness)");
    return lines.join("\n");
  }
  const learner = tok.learner_logprobs ? tok.learner_logprobs[i] : null;
  const weight = tok.importance_weights ? tok.importance_weights[i] : null;
  const gap = tokenGap(tok, i);
  lines.push(
    `loss mask 1 · turn ${turn.index} (${turn.kind}) · policy version ${turn.policy_version}`,
    `advantage ${signed(tokenAdvantage(segment, i))}`,
    `teacher log-prob ${gap === null ? "absent" : fmt(tok.teacher_logprobs[i], 4) + " · gap " + signed(gap)}`,
    `sampler log-prob ${fmt(tok.sampler_logprobs[i], 4)}`,
    `learner log-prob ${learner === null ? "absent" : fmt(learner, 4)}`,
    `importance weight ${weight === null ? "absent" : fmt(weight, 4)}`,
  );
  return lines.join("\n");
}

function tokenShade(segment, i, shade) {
  const tok = segment.tokens;
  if (shade === "weight") return weightColor(tok.importance_weights ? tok.importance_weights[i] : null);
  if (shade === "sampler") return samplerColor(tok.sampler_logprobs[i]);
  if (shade === "gap") return gapColor(tokenGap(tok, i));
  return advantageColor(tokenAdvantage(segment, i));
}

function tokenText(tok, i) {
  if (!tok.text) return tok.ids[i] + " ";
  const text = tok.text[i];
  if (text === "") return `⟨${tok.ids[i]}⟩`;
  return text.replace(/\n/g, "↵\n");
}

function segmentTokens(segment, shade, hidePrompts, info) {
  const tok = segment.tokens;
  const owner = turnOfPosition(segment);
  const view = el("div", { class: "token-view", "data-segment": segment.index });
  const promptEnd = segment.turns.length ? segment.turns[0].start : tok.ids.length;
  if (hidePrompts) {
    const title = `the prompt: ${promptEnd} tokens, loss mask 0 (untick "fold the prompts" to see them)`;
    view.append(el("span", { class: "tok m0 folded", title }, `⟨prompt: ${promptEnd} tokens⟩\n`));
  }
  for (let i = hidePrompts ? promptEnd : 0; i < tok.ids.length; i++) {
    const k = owner[i];
    const turn = k >= 0 ? { index: k, ...segment.turns[k] } : null;
    const summary = turn !== null && turn.kind === "summary";
    if (summary && i === turn.start) {
      view.append(el("span", { class: "summary-boundary summary-start" }, "⟦summary⟧"));
    }
    const classes = ["tok", "m" + tok.mask[i]];
    if (tok.mask[i]) classes.push(advClass(segment.advantage));
    if (summary) classes.push("summary-tok");
    const title = tokenTitle(segment, i, turn);
    const span = el("span", { class: classes.join(" "), title, "data-i": i }, tokenText(tok, i));
    if (tok.mask[i]) span.style.backgroundColor = tokenShade(segment, i, shade);
    view.append(span);
  }
  view.addEventListener("mouseover", (event) => {
    const span = event.target.closest(".tok");
    if (span) info.textContent = span.getAttribute("title").replace(/\n/g, " · ");
  });
  return view;
}

// A group ------------------------------------------------------------------------------------------

async function groupPage(id) {
  const g = await getJSON("/api/groups/" + encodeURIComponent(id));
  const maxAbs = Math.max(1e-9, ...g.members.map((m) => Math.abs(m.row.advantage)));
  const columns = g.members.map((m) => rolloutColumn(m, maxAbs));
  return el("div", { id: "group", "data-id": g.group_id },
    el("h2", {}, "group ", el("span", { class: "mono" }, g.group_id)),
    el("p", {}, `task ${g.task_id} · ${g.members.length} rollouts · mean reward ${fmt(g.reward_mean)} · `,
      el("a", { href: "#/?task=" + encodeURIComponent(g.task_id) }, "all trajectories of this task")),
    el("div", { class: "group-grid" }, columns),
  );
}

function rolloutColumn(member, maxAbs) {
  const r = member.row;
  const width = (50 * Math.abs(r.advantage)) / maxAbs;
  const bar = el("span", {
    style: `left: ${r.advantage >= 0 ? 50 : 50 - width}%; width: ${width}%; background: ${advantageColor(r.advantage)}`,
  });
  return el("div", { class: "rollout-col", "data-id": r.id },
    el("h3", {}, trajectoryLink(r.id, `sample ${r.sample_index}`)),
    el("div", {}, "reward ", el("b", { class: "reward" }, fmt(r.reward)), " · advantage ",
      el("span", { class: "chip advantage " + advClass(r.advantage) }, signed(r.advantage))),
    el("div", { class: "adv-bar", title: "advantage, scaled to the group's largest" }, bar),
    el("div", { class: "muted" },
      `${r.status} · correct ${fmt(r.correct, 2)} · ${r.turns} turns · ${r.summaries} summaries · ${r.tokens} tokens`),
    el("h4", {}, "last message"), el("pre", {}, member.last_text),
    el("h4", {}, "final diff"), diffView(member.final_diff),
  );
}

// Training plots -----------------------------------------------------------------------------------

async function plotsPage() {
  const metrics = await getJSON("/api/metrics");
  if (!metrics.plots.length) {
    return el("p", { class: "muted", id: "no-plots" },
      "no training metrics in this run (metrics.jsonl gets one line per step of harness train)");
  }
  return el("div", {},
    el("h2", {}, `training: ${metrics.steps} steps`),
    el("div", { class: "plots" }, metrics.plots.map(plotFigure)),
  );
}

function plotFigure(plot) {
  const legendItems = plot.series.map((s, k) =>
    el("span", {}, el("i", { style: `background: ${SERIES_COLORS[k % SERIES_COLORS.length]}` }), s.key));
  return el("figure", { class: "plot", "data-title": plot.title },
    el("figcaption", {}, plot.title, el("div", { class: "plot-legend" }, legendItems)),
    lineChart(plot.series));
}

function niceRange(values) {
  let low = Math.min(...values);
  let high = Math.max(...values);
  if (low === high) {
    const pad = Math.abs(low) * 0.1 || 0.5;
    return [low - pad, high + pad];
  }
  const pad = (high - low) * 0.08;
  return [low - pad, high + pad];
}

function lineChart(series) {
  const W = 380, H = 200, L = 52, R = 12, T = 10, B = 30;
  const xs = series.flatMap((s) => s.points.map((p) => p[0]));
  const ys = series.flatMap((s) => s.points.map((p) => p[1]));
  const [xLow, xHigh] = [Math.min(...xs), Math.max(...xs)];
  const [yLow, yHigh] = niceRange(ys);
  const sx = (x) => L + (xHigh === xLow ? (W - L - R) / 2 : ((x - xLow) / (xHigh - xLow)) * (W - L - R));
  const sy = (y) => T + (1 - (y - yLow) / (yHigh - yLow)) * (H - T - B);
  const chart = svg("svg", { class: "plot-svg", viewBox: `0 0 ${W} ${H}`, role: "img" });
  for (const y of [yLow, (yLow + yHigh) / 2, yHigh]) {
    chart.append(svg("line", { class: "grid-line", x1: L, x2: W - R, y1: sy(y), y2: sy(y) }));
    chart.append(svg("text", { x: L - 4, y: sy(y) + 3, "text-anchor": "end" }, Number(y.toPrecision(3))));
  }
  chart.append(svg("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
  chart.append(svg("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }));
  const steps = [...new Set(xs)].sort((a, b) => a - b);
  const every = Math.max(1, Math.ceil(steps.length / 10));
  steps.forEach((x, k) => {
    if (k % every === 0) chart.append(svg("text", { x: sx(x), y: H - B + 13, "text-anchor": "middle" }, x));
  });
  chart.append(svg("text", { x: (L + W - R) / 2, y: H - 3, "text-anchor": "middle" }, "step"));
  series.forEach((s, k) => {
    const color = SERIES_COLORS[k % SERIES_COLORS.length];
    const d = s.points.map((p, i) => `${i ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ");
    chart.append(svg("path", { class: "series", d, stroke: color, "data-key": s.key }));
    for (const [x, y] of s.points) {
      chart.append(svg("circle", { class: "point", cx: sx(x), cy: sy(y), r: 3, fill: color },
        svg("title", {}, `${s.key} · step ${x}: ${Number(y.toPrecision(4))}`)));
    }
  });
  return chart;
}

start();
