/* Inbox: quarantined messages with Retry and Drop (the control API's /inbox routes' logic),
   undeliverable answers, and messages waiting to be run or sent again. */
"use strict";
(() => {
  const tbody = document.querySelector("#inbox tbody");
  const undeliverable = document.querySelector("#undeliverable tbody");
  const waiting = document.querySelector("#waiting tbody");
  const problem = document.getElementById("inbox-error");
  const when = (t) => new Date(t * 1000).toLocaleString();
  function row(q) {
    const act = (what) => async () => {
      await H.post("/api/inbox/" + q.id + "/" + what);
      H.flash(what === "retry" ? "Retrying message " + q.id + "." : "Dropped message " + q.id + ".");
    };
    return H.el("tr", { "data-id": String(q.id) },
      H.el("td", {}, q.id), H.el("td", {}, q.platform), H.el("td", {}, q.session_key),
      H.el("td", {}, q.attempts), H.el("td", {}, when(q.accepted_at)),
      H.el("td", { class: "text" }, q.text),
      H.el("td", {}, H.button("Retry", "", act("retry")), " ", H.button("Drop", "danger", act("drop"))));
  }
  function lost(e) {
    return H.el("tr", { "data-id": String(e.id) },
      H.el("td", {}, e.id), H.el("td", {}, e.platform), H.el("td", {}, e.session_key),
      H.el("td", {}, e.user_name), H.el("td", {}, when(e.updated_at)),
      H.el("td", { class: "text" }, e.text), H.el("td", { class: "text reply" }, e.reply));
  }
  function waits(e) {
    return H.el("tr", { "data-id": String(e.id), "data-status": e.status },
      H.el("td", {}, e.id), H.el("td", {}, e.platform), H.el("td", {}, e.session_key),
      H.el("td", {}, e.user_name), H.el("td", {}, when(e.accepted_at)),
      H.el("td", {}, e.status === "done" ? "its reply to be sent" : "a run"),
      H.el("td", { class: "text" }, e.text));
  }
  H.stream("inbox", {
    inbox(data) {
      H.fill(tbody, data.quarantined.map(row));
      H.fill(undeliverable, data.undeliverable.map(lost), "undeliverable-empty");
      H.fill(waiting, data.waiting.map(waits), "waiting-empty");
      problem.hidden = !data.error;
      problem.textContent = data.error || "";
    },
  });
})();
