/* Sessions: what runs and what waits, live; Stop is `/stop` for that session. */
"use strict";
(() => {
  const tbody = document.querySelector("#sessions tbody");
  const counts = document.getElementById("counts");
  function row(s) {
    const link = H.el("a", { href: H.prefix + "/session?key=" + encodeURIComponent(s.key) }, s.key);
    const user = s.user_name ? s.user_name + " (" + s.user_id + ")" : s.user_id;
    const stop = s.state === "idle" ? "" : H.el("button", { class: "danger", "data-stop": s.key }, "Stop");
    return H.el("tr", { "data-key": s.key },
      H.el("td", {}, link), H.el("td", {}, s.platform), H.el("td", {}, user),
      H.el("td", { class: "state" }, s.state), H.el("td", {}, H.duration(s.seconds)),
      H.el("td", {}, s.pending), H.el("td", {}, s.policy),
      H.el("td", { class: "text" }, s.text), H.el("td", {}, stop));
  }
  H.stream("sessions", {
    sessions(data) {
      H.fill(tbody, data.sessions.map(row));
      const more = data.counts.tracked > data.shown ? " (" + data.shown + " of " + data.counts.tracked + " shown)" : "";
      counts.textContent = data.counts.active + " active, " + data.counts.pending + " waiting" + more;
    },
  });
})();
