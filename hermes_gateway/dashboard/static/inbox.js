/* Inbox: quarantined messages with Retry and Drop (the control API's /inbox routes' logic). */
"use strict";
(() => {
  const tbody = document.querySelector("#inbox tbody");
  function row(q) {
    const act = (what) => async () => {
      await H.post("/api/inbox/" + q.id + "/" + what);
      H.flash(what === "retry" ? "Retrying message " + q.id + "." : "Dropped message " + q.id + ".");
    };
    return H.el("tr", { "data-id": String(q.id) },
      H.el("td", {}, q.id), H.el("td", {}, q.platform), H.el("td", {}, q.session_key),
      H.el("td", {}, q.attempts), H.el("td", {}, new Date(q.accepted_at * 1000).toLocaleString()),
      H.el("td", { class: "text" }, q.text),
      H.el("td", {}, H.button("Retry", "", act("retry")), " ", H.button("Drop", "danger", act("drop"))));
  }
  H.stream("inbox", { inbox(data) { H.fill(tbody, data.quarantined.map(row)); } });
})();
