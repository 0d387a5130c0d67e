// The hookbus console. The token comes once from the URL fragment (#token=...), is kept in
// memory only, and goes with every request as `Authorization: Bearer`. Event streams are read
// with fetch (EventSource cannot send the header), so the token never appears in a URL.
"use strict";

let token = null;
let followed = null;   // the followed session's id
let stream = null;     // the AbortController of its event stream
const rows = new Map();        // seq -> timeline row
const waitingRuns = new Map(); // seq -> hooks frame that arrived before its row

function takeToken() {
  const params = new URLSearchParams(location.hash.replace(/^#/, ""));
  const t = params.get("token");
  if (t) {
    history.replaceState(null, "", location.pathname + location.search);
    return t;
  }
  return null;
}

function problem(text) {
  const p = document.getElementById("problem");
  p.hidden = !text;
  p.textContent = text || "";
}

async function api(path, options = {}) {
  const headers = { authorization: "Bearer " + token };
  if (options.body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, { ...options, headers: { ...headers, ...(options.headers || {}) } });
  if (response.status === 401) {
    problem("The token was refused.");
    showLogin();
    throw new Error("unauthorized");
  }
  return response;
}

function setState(kind, text) {
  const s = document.getElementById("stream-state");
  s.className = "state " + kind;
  s.textContent = text;
}

function text(tag, value, className) {
  const el = document.createElement(tag);
  el.textContent = value === undefined || value === null ? "" : String(value);
  if (className) el.className = className;
  return el;
}

// ---- sessions ----

async function refreshSessions() {
  if (!token) return;
  let sessions;
  try {
    sessions = (await (await api("/sessions")).json()).sessions;
  } catch (e) { return; }
  const list = document.getElementById("sessions");
  list.replaceChildren();
  if (sessions.length === 0) list.appendChild(text("li", "none", "muted"));
  for (const s of sessions) {
    const li = document.createElement("li");
    li.className = "session" + (s.id === followed ? " current" : "");
    li.dataset.id = s.id;
    li.appendChild(text("span", s.id, "id"));
    li.appendChild(text("span", s.permission_mode + (s.busy ? " · running a turn" : "") + (s.detached ? " · detached" : ""), "meta"));
    li.onclick = () => follow(s.id);
    list.appendChild(li);
  }
  if (followed === null && sessions.length > 0) {
    const wanted = new URLSearchParams(location.search).get("session");
    const pick = sessions.find((s) => s.id === wanted) || sessions[sessions.length - 1];
    follow(pick.id);
  }
}

// ---- the timeline ----

function decisionOf(env) {
  switch (env.hook_event_name) {
    case "PermissionDenied": return "denied (" + env.source + ")";
    case "PermissionRequest": return "asks the user";
    case "PostToolUse": return "ran, " + env.duration_ms + " ms";
    case "PostToolUseFailure": return "failed: " + env.kind;
    case "Interrupt": return env.reason;
    case "SessionEnd": return env.reason;
    default: return "";
  }
}

function showEnvelope(env) {
  const row = document.createElement("tr");
  row.className = "event";
  row.dataset.event = env.hook_event_name;
  row.dataset.seq = env.seq;
  row.appendChild(text("td", env.seq));
  row.appendChild(text("td", env.hook_event_name));
  row.appendChild(text("td", env.tool_name || ""));
  row.appendChild(text("td", decisionOf(env), "decision"));
  const hooks = text("td", "", "hooks");
  row.appendChild(hooks);
  document.getElementById("events").appendChild(row);
  rows.set(env.seq, row);
  const early = waitingRuns.get(env.seq);
  if (early) { waitingRuns.delete(env.seq); showRuns(early); }
}

// The hooks that ran on one event, as a small waterfall: one bar per hook, its length the
// hook's latency relative to the slowest hook of that event.
function showRuns(frame) {
  const row = rows.get(frame.seq);
  if (!row) { waitingRuns.set(frame.seq, frame); return; }
  const cell = row.querySelector("td.hooks");
  cell.replaceChildren();
  const slowest = Math.max(1, ...frame.runs.map((r) => r.latency_us));
  for (const run of frame.runs) {
    const div = document.createElement("div");
    div.className = "run" + (run.decision !== "continue" ? " decided" : "");
    div.dataset.hook = run.hook;
    div.dataset.decision = run.decision;
    div.appendChild(text("span", run.hook, "name"));
    const bar = text("span", "", "bar");
    bar.style.width = Math.max(2, Math.round((run.latency_us / slowest) * 120)) + "px";
    div.appendChild(bar);
    div.appendChild(text("span", run.status === "answered" ? run.decision : run.status, "decision"));
    div.appendChild(text("span", run.latency_us + " µs", "latency"));
    if (run.detail) div.title = run.detail;
    cell.appendChild(div);
  }
  if (frame.decision !== "continue") {
    const d = row.querySelector("td.decision");
    if (!d.textContent) d.textContent = frame.decision;
  }
}

function onFrame(name, data) {
  let value;
  try { value = JSON.parse(data); } catch (e) { return; }
  if (name === "hooks") showRuns(value);
  else if (name === "lagged") setState("lagged", "lagged: " + value.total + " skipped");
  else if (name === "closed") setState("closed", "closed (" + value.reason + ")");
  else showEnvelope(value);
}

async function follow(id) {
  if (stream) stream.abort();
  followed = id;
  rows.clear();
  waitingRuns.clear();
  document.getElementById("events").replaceChildren();
  document.getElementById("session").textContent = id;
  for (const li of document.querySelectorAll("li.session")) {
    li.classList.toggle("current", li.dataset.id === id);
  }
  const controller = new AbortController();
  stream = controller;
  setState("live", "live");
  try {
    const response = await api("/sessions/" + encodeURIComponent(id) + "/events", { signal: controller.signal });
    if (!response.ok) { setState("closed", "closed (" + response.status + ")"); return; }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let name = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) name = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (data.length > 0) onFrame(name, data.join("\n"));
      }
    }
    if (stream === controller && !document.getElementById("stream-state").classList.contains("closed")) {
      setState("closed", "closed");
    }
  } catch (e) {
    if (stream === controller) setState("closed", "closed (disconnected)");
  }
}

// ---- approvals ----

async function answer(id, decision) {
  try {
    await api("/approvals/" + id, { method: "POST", body: JSON.stringify({ decision }) });
  } catch (e) { /* shown by api() */ }
  refreshApprovals();
}

async function refreshApprovals() {
  if (!token) return;
  let approvals;
  try {
    approvals = (await (await api("/approvals")).json()).approvals;
  } catch (e) { return; }
  const box = document.getElementById("approvals");
  box.replaceChildren();
  if (approvals.length === 0) box.appendChild(text("span", "none", "muted"));
  for (const a of approvals) {
    const div = document.createElement("div");
    div.className = "approval";
    div.dataset.id = a.id;
    div.dataset.session = a.session_id;
    div.appendChild(text("span", a.session_id, "session"));
    div.appendChild(text("span", "#" + a.id + " " + a.tool_name + " " + JSON.stringify(a.input) + " — " + a.reason, "what"));
    for (const [label, decision] of [["Allow", "allow"], ["Deny", "deny"]]) {
      const b = text("button", label, decision);
      b.type = "button";
      b.onclick = () => answer(a.id, decision);
      div.appendChild(b);
    }
    box.appendChild(div);
  }
}

// ---- start ----

function showLogin() {
  document.getElementById("login").hidden = false;
}

function start() {
  document.getElementById("login").hidden = true;
  problem("");
  refreshSessions();
  refreshApprovals();
}

document.getElementById("token-go").onclick = () => {
  const t = document.getElementById("token-input").value.trim();
  if (t) { token = t; document.getElementById("token-input").value = ""; start(); }
};

token = takeToken();
if (token) start(); else showLogin();
setInterval(refreshSessions, 1000);
setInterval(refreshApprovals, 400);
