/* Jobs: shown only when a scheduler registered its jobs with the dashboard. */
"use strict";
(() => {
  const head = document.querySelector("#jobs thead tr");
  const tbody = document.querySelector("#jobs tbody");
  function render(jobs) {
    const columns = jobs.length ? Object.keys(jobs[0]) : [];
    head.replaceChildren(...columns.map((c) => H.el("th", {}, c)), H.el("th", {}));
    H.fill(tbody, jobs.map((job) => H.el("tr", {},
      ...columns.map((c) => H.el("td", {}, job[c] === null ? "" : job[c])),
      H.el("td", {}, ...["run", "pause", "resume"].map((a) =>
        H.button(a, "", async () => { await H.post("/api/jobs/" + encodeURIComponent(job.id) + "/" + a); H.flash(a + ": " + job.id); }))))));
  }
  H.stream("jobs", { jobs(data) { render(data.jobs); } });
})();
