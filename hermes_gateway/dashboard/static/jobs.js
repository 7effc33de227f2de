/* Jobs: each job with its newest runs (status, delivery, answer), and Run now, Pause, Resume.
   A job whose stored schedule cannot be used shows as "error", with why. Everything a model or
   user wrote goes in as text. */
"use strict";
(() => {
  const tbody = document.querySelector("#jobs tbody");
  const LABEL = { run: "Run now", pause: "Pause", resume: "Resume" };

  function action(job, what) {
    return H.button(LABEL[what], "", async () => {
      const done = await H.post("/api/jobs/" + encodeURIComponent(job.id) + "/" + what);
      H.flash(done.result);
    });
  }

  function runs(job) {
    if (!job.runs.length) return H.el("p", { class: "muted" }, "No runs yet.");
    const head = H.el("tr", {}, ...["Slot", "Kind", "Status", "Delivery", "Took", "Answer"]
      .map((t) => H.el("th", {}, t)));
    const rows = job.runs.map((r) => H.el("tr", { "data-run": String(r.id), "data-status": r.status },
      H.el("td", {}, r.slot), H.el("td", {}, r.kind), H.el("td", { class: "status" }, r.status),
      H.el("td", { class: "delivery" }, r.delivery),
      H.el("td", {}, r.seconds === null ? "–" : r.seconds + " s"),
      H.el("td", { class: "text" }, H.el("pre", { class: "output" }, r.output),
        r.error ? H.el("span", { class: "error" }, r.error) : null)));
    return H.el("table", { class: "runs" }, H.el("thead", {}, head), H.el("tbody", {}, ...rows));
  }

  function rows(job) {
    const state = job.error ? "error" : job.state;
    const buttons = job.error ? [] : [action(job, "run")];
    if (state === "active") buttons.push(action(job, "pause"));
    if (state === "paused") buttons.push(action(job, "resume"));
    const main = H.el("tr", { "data-job": job.id, "data-state": state, class: "job" },
      H.el("td", { class: "name", title: job.prompt }, job.name), H.el("td", {}, job.chat),
      H.el("td", {}, job.schedule), H.el("td", {}, job.zone), H.el("td", {}, job.next_run || "–"),
      H.el("td", { class: "state", title: job.error || "" }, state), H.el("td", {}, job.runs_total),
      H.el("td", { class: "actions" }, ...buttons));
    const detail = H.el("tr", { "data-runs-of": job.id, class: "detail" },
      H.el("td", { colSpan: 8 }, job.error ? H.el("p", { class: "error" }, job.error) : null,
        runs(job)));
    return [main, detail];
  }

  H.stream("jobs", {
    jobs(data) {
      const made = data.jobs.flatMap(rows);
      H.fill(tbody, made);
    },
  });
})();
