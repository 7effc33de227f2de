/* Shared by every page: live event streams that survive a gateway restart, CSRF-carrying
   POSTs, and DOM helpers that put user text in as text (never as HTML). */
"use strict";

const H = (() => {
  const prefix = document.querySelector('meta[name="prefix"]').content;
  let csrf = document.querySelector('meta[name="csrf"]').content;
  const conn = document.getElementById("conn");

  function setConn(state, text) {
    if (!conn) return;
    conn.className = "conn " + state;
    conn.textContent = text;
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k.startsWith("data-")) node.setAttribute(k, v);
      else node[k] = v;
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function flash(text, isError) {
    const box = document.getElementById("flash");
    box.textContent = text;
    box.className = "flash" + (isError ? " error" : "");
    box.hidden = false;
    clearTimeout(flash.timer);
    flash.timer = setTimeout(() => { box.hidden = true; }, 6000);
  }

  async function post(path, body) {
    const response = await fetch(prefix + path, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify(body || {}),
      credentials: "same-origin",
    });
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (!response.ok) {
      const why = data && data.error ? data.error.message : response.statusText;
      throw new Error(why || ("HTTP " + response.status));
    }
    return data;
  }

  /* An EventSource on /events/<topic>; reconnects by itself while the gateway restarts,
     and again when the browser gave up (a 503 while it was starting). */
  function stream(topic, handlers, query) {
    let source = null;
    let closed = false;
    let failures = 0;
    function open() {
      const qs = query ? "?" + new URLSearchParams(query).toString() : "";
      source = new EventSource(prefix + "/events/" + topic + qs);
      source.addEventListener("open", () => { failures = 0; setConn("live", "live"); });
      source.addEventListener("hello", (e) => { csrf = JSON.parse(e.data).csrf; });
      for (const [name, fn] of Object.entries(handlers)) {
        source.addEventListener(name, (e) => fn(JSON.parse(e.data)));
      }
      source.addEventListener("error", () => {
        if (closed) return;
        setConn("wait", "reconnecting…");
        if (source.readyState === EventSource.CLOSED) {
          failures += 1;
          setTimeout(() => { if (!closed) checkLogin().then(open); }, Math.min(10000, 1000 * failures));
        }
      });
    }
    open();
    return { close() { closed = true; if (source) source.close(); } };
  }

  async function checkLogin() {
    try {
      const r = await fetch(location.href, { redirect: "manual", credentials: "same-origin" });
      if (r.type === "opaqueredirect") location.reload();
    } catch (e) { /* still down: keep trying */ }
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "–";
    const s = Math.round(seconds);
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  }

  function button(text, cls, onClick) {
    const b = el("button", { class: cls, type: "button" }, text);
    b.addEventListener("click", async () => {
      b.disabled = true;
      try { await onClick(); } catch (e) { flash(e.message, true); } finally { b.disabled = false; }
    });
    return b;
  }

  function fill(tbody, rows, emptyId) {
    tbody.replaceChildren(...rows);
    const empty = document.getElementById(emptyId || "empty");
    if (empty) empty.hidden = rows.length > 0;
  }

  document.addEventListener("click", async (e) => {
    const target = e.target.closest("[data-stop]");
    if (!target) return;
    target.disabled = true;
    try {
      await post("/api/sessions/stop", { key: target.getAttribute("data-stop") });
      flash("Stopped.");
    } catch (err) { flash(err.message, true); } finally { target.disabled = false; }
  });

  const logout = document.getElementById("logout");
  if (logout) logout.addEventListener("click", async () => {
    await post("/logout");
    location.href = prefix + "/login";
  });

  return { prefix, el, post, stream, flash, duration, button, fill, setConn, csrf: () => csrf };
})();

/* A session's page follows its state through the sessions stream. */
if (document.body.dataset.page === "session") {
  const key = document.getElementById("session-key").textContent;
  const state = document.getElementById("session-state");
  H.stream("sessions", {
    sessions(data) {
      const mine = data.sessions.find((s) => s.key === key);
      state.textContent = mine ? mine.state : "idle";
    },
  });
}
