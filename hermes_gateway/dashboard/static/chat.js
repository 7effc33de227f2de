/* Chat: a message goes to the local API (through /dashboard/api/chat); the answer streams in. */
"use strict";
(() => {
  const list = document.getElementById("chat");
  const form = document.getElementById("chat-form");
  const box = form.querySelector("textarea");

  function bubble(role, text) {
    const body = H.el("pre", {}, text);
    const item = H.el("li", { class: role }, H.el("span", { class: "role" }, role), body);
    list.append(item);
    return body;
  }

  function take(line, out) {
    if (!line.startsWith("data:")) return;
    const data = line.slice(5).trim();
    if (!data || data === "[DONE]") return;
    const chunk = JSON.parse(data);
    if (chunk.hermes && chunk.hermes.tool) {
      out.dataset.tool = chunk.hermes.tool + " " + chunk.hermes.phase;
      return;
    }
    const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
    if (delta && delta.content) out.textContent += delta.content;
  }

  async function send(text) {
    bubble("user", text);
    const out = bubble("assistant", "");
    out.classList.add("streaming");
    const response = await fetch(H.prefix + "/api/chat", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": H.csrf() },
      body: JSON.stringify({ text }),
      credentials: "same-origin",
    });
    if (!response.ok) {
      let why = response.statusText;
      try { why = (await response.json()).error.message; } catch (e) { /* not JSON */ }
      out.textContent = "(" + why + ")";
      out.classList.replace("streaming", "failed");
      return;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffered = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      const lines = buffered.split("\n");
      buffered = lines.pop();
      for (const line of lines) take(line, out);
    }
    take(buffered, out);
    out.classList.remove("streaming");
    out.classList.add("done");
  }

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = box.value;
    if (!text.trim()) return;
    box.value = "";
    send(text).catch((e) => H.flash(e.message, true));
  });
  box.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); form.requestSubmit(); }
  });
  H.stream("sessions", {});  // the connection indicator
})();
