/* Logs: a live tail with the filters of `hermes gateway logs` (level, platform, session). */
"use strict";
(() => {
  const MAX_ROWS = 1000;
  const tbody = document.querySelector("#logs tbody");
  const lost = document.getElementById("lost");
  const FIXED = new Set(["timestamp", "level", "event", "logger"]);
  let current = null;
  function row(entry) {
    const details = Object.entries(entry).filter(([k]) => !FIXED.has(k))
      .map(([k, v]) => k + "=" + v).join(" ");
    const stamp = String(entry.timestamp || "").slice(0, 23).replace("T", " ");
    return H.el("tr", { class: "lvl-" + (entry.level || "info") },
      H.el("td", { class: "time" }, stamp), H.el("td", {}, entry.level || ""),
      H.el("td", { class: "event" }, entry.event || ""), H.el("td", { class: "text" }, details));
  }
  function start(query) {
    if (current) current.close();
    tbody.replaceChildren();
    current = H.stream("logs", {
      logs(data) {
        tbody.prepend(...data.lines.map(row).reverse());
        while (tbody.rows.length > MAX_ROWS) tbody.deleteRow(-1);
        lost.textContent = data.lost ? data.lost + " lines skipped (too fast to show)" : "";
      },
    }, query);
  }
  const form = document.getElementById("filters");
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const query = {};
    for (const [k, v] of new FormData(form).entries()) if (v) query[k] = v;
    start(query);
  });
  start({});
})();
