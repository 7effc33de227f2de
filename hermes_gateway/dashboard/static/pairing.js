/* Pairing: pending codes (Approve) and approved users (Revoke), through the pairing routes. */
"use strict";
(() => {
  const tbody = document.querySelector("#pairing tbody");
  const error = document.getElementById("pairing-error");
  function show(e) { error.textContent = e.message; error.hidden = false; }
  async function approve(platform, code) {
    error.hidden = true;
    const r = await H.post("/api/pairing/approve", { platform, code });
    H.flash("Approved " + r.platform + " user " + r.approved + ".");
  }
  function row(e) {
    let action;
    if (e.status === "pending") {
      action = H.button("Approve", "", () => approve(e.platform, e.code).catch(show));
    } else {
      action = H.button("Revoke", "danger", async () => {
        await H.post("/api/pairing/revoke", { platform: e.platform, user_id: e.user_id });
        H.flash("Revoked " + e.platform + " user " + e.user_id + ".");
      });
    }
    return H.el("tr", { "data-user": e.user_id, "data-status": e.status },
      H.el("td", {}, e.platform), H.el("td", { class: "status" }, e.status), H.el("td", {}, e.code),
      H.el("td", {}, e.user_id), H.el("td", {}, e.user_name), H.el("td", {}, H.duration(e.age_s)),
      H.el("td", {}, action));
  }
  document.getElementById("approve-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const form = new FormData(ev.target);
    approve(form.get("platform"), form.get("code")).then(() => ev.target.reset(), show);
  });
  H.stream("pairing", {
    pairing(data) {
      H.fill(tbody, data.entries.map(row));
      if (data.error) show(new Error(data.error));
    },
  });
})();
