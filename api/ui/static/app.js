// The batch dashboard's scripts: live progress (the progress section and
// the executors' sections' totals) fed by the batch's Server-Sent Events
// stream, a running
// document's page kept up to date, and confirmations on buttons. The pages
// work without them.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (ev) => {
      if (!window.confirm(form.dataset.confirm)) ev.preventDefault();
    });
  }
  const live = document.getElementById("live");
  // A finished batch changes only by a retry, which reloads the page.
  if (live && window.EventSource && !live.dataset.terminal) follow(live);
  const doc = document.querySelector("#progress[data-poll]");
  if (doc) poll(doc);
});

// poll reads a running document's status (GET /documents/:id) every
// second, and reloads the page when its status, step, chunks done or
// errors change: the server renders the new state. A finished document
// is not polled.
function poll(section) {
  const note = document.getElementById("document-live");
  const tick = async () => {
    try {
      const resp = await fetch(section.dataset.poll, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (resp.ok) {
        const d = await resp.json();
        const state = [d.status, d.currentStep, d.progress.processedChunks, (d.errors || []).length].join(" ");
        if (state !== section.dataset.state) {
          window.location.reload();
          return;
        }
        if (note) note.textContent = "Follows the document as it runs.";
      } else if (note) {
        note.textContent = "Status unavailable (" + resp.status + "); trying again.";
      }
    } catch (e) {
      if (note) note.textContent = "Status unavailable; trying again.";
    }
    setTimeout(tick, 1000);
  };
  setTimeout(tick, 1000);
}

// follow keeps the progress section up to date from the stream until the
// batch ends.
function follow(live) {
  const state = document.getElementById("live-state");
  const status = document.querySelector("#batch-status .badge");
  const started = live.dataset.status;
  const es = new EventSource(live.dataset.stream, { withCredentials: true });
  es.addEventListener("open", () => {
    state.textContent = "Live.";
    live.dataset.connected = "true";
  });
  es.addEventListener("status", (ev) => {
    const st = JSON.parse(ev.data);
    render(document.getElementById("live-phases"), st.phases || []);
    const none = document.getElementById("no-tasks");
    if (none && st.phases && st.phases.length) none.remove();
    for (const p of st.phases || []) renderLive(p);
    status.textContent = st.status;
    status.className = "badge s-" + st.status;
    live.dataset.status = st.status;
    if (st.status !== started) {
      state.textContent = "Now " + st.status + ". ";
      const a = document.createElement("a");
      a.href = window.location.pathname;
      a.textContent = "Reload for the details.";
      state.append(a);
    }
  });
  es.addEventListener("end", () => {
    es.close();
    live.dataset.ended = "true";
    if (live.dataset.status === started) state.textContent = "Finished.";
  });
  es.addEventListener("error", () => {
    if (es.readyState === EventSource.CONNECTING) state.textContent = "Reconnecting…";
  });
}

// render makes the phase bars match the phases of a status document.
function render(container, phases) {
  for (const p of phases) {
    let row = container.querySelector('.phase[data-phase="' + CSS.escape(p.phase) + '"]');
    if (!row) {
      row = document.createElement("div");
      row.className = "phase";
      row.dataset.phase = p.phase;
      const head = document.createElement("div");
      head.className = "phase-head";
      const name = document.createElement("span");
      name.className = "phase-name";
      name.textContent = p.phase;
      const count = document.createElement("span");
      count.className = "phase-count";
      head.append(name, " ", count);
      const bar = document.createElement("div");
      bar.className = "bar";
      bar.setAttribute("role", "progressbar");
      bar.setAttribute("aria-label", p.phase);
      bar.setAttribute("aria-valuemin", "0");
      const done = document.createElement("span");
      done.className = "done";
      const failed = document.createElement("span");
      failed.className = "failed";
      bar.append(done, failed);
      row.append(head, bar);
      container.append(row);
    }
    const total = p.tasks_total;
    const bar = row.querySelector(".bar");
    bar.setAttribute("aria-valuemax", String(total));
    bar.setAttribute("aria-valuenow", String(p.tasks_completed));
    bar.querySelector(".done").style.width = pct(p.tasks_completed, total) + "%";
    bar.querySelector(".failed").style.width = pct(p.tasks_failed, total) + "%";
    row.querySelector(".phase-count").textContent =
      p.tasks_completed + " / " + total + (p.unit ? " " + p.unit : "") + " done" + (p.tasks_failed ? ", " + p.tasks_failed + " failed" : "");
  }
}

// renderLive makes an executor's section of phase p match it: its phase
// bar, and each element marked data-count="k" shows p's field k or its
// detail's (the rest of the section stays as loaded).
function renderLive(p) {
  for (const section of document.querySelectorAll('[data-live-phase="' + CSS.escape(p.phase) + '"]')) {
    const bars = section.querySelector(".phases");
    if (bars) render(bars, [p]);
    for (const el of section.querySelectorAll("[data-count]")) {
      const k = el.dataset.count;
      const v = k in p ? p[k] : (p.detail || {})[k];
      if (v !== undefined) el.textContent = String(v);
    }
  }
}

function pct(n, total) {
  return total > 0 ? Math.floor((n * 100) / total) : 0;
}
