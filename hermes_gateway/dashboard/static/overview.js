/* Overview: platform states and readiness, gateway figures, and the last hour as small charts
   (uPlot) from the gateway's in-memory samples. */
"use strict";
(() => {
  const WINDOW_S = 3600;
  const CHARTS = [
    { title: "Messages per minute", series: [["messages_per_min", "msgs/min"]] },
    // latencies exist only in intervals that had an answer: dots, or a lone one draws nothing
    { title: "Answer time (s)", dots: true, series: [["answer_p50_s", "p50"], ["answer_p99_s", "p99"]] },
    { title: "Model call latency (s)", dots: true, series: [["model_p50_s", "p50"], ["model_p99_s", "p99"]] },
    { title: "Model errors", series: [["model_errors", "errors"]] },
    { title: "Loop lag p99 (ms)", series: [["loop_lag_p99_ms", "p99 ms"]] },
    { title: "Pool and sessions", series: [["pool_busy", "pool busy"], ["active_sessions", "active sessions"]] },
  ];
  const COLORS = ["#2f6fdf", "#d9480f", "#2b8a3e"];
  const charts = [];
  let data = null;

  function build(window_) {
    data = window_;
    const holder = document.getElementById("charts");
    holder.replaceChildren();
    charts.length = 0;
    for (const spec of CHARTS) {
      const box = H.el("div", { class: "chart card", "data-chart": spec.series[0][0] }, H.el("h3", {}, spec.title));
      holder.append(box);
      const opts = {
        width: Math.max(280, Math.min(440, holder.clientWidth / 2 - 24)),
        height: 150,
        legend: { show: true },
        cursor: { drag: { x: false, y: false } },
        scales: { x: { time: true } },
        series: [{}, ...spec.series.map(([, label], i) => ({
          label, stroke: COLORS[i], width: 1.5, spanGaps: false,
          ...(spec.dots ? { points: { show: true, size: 5, fill: COLORS[i] } } : {}),
        }))],
        axes: [{ space: 60 }, { size: 48 }],
      };
      charts.push({ spec, plot: new uPlot(opts, columns(spec), box) });
    }
  }

  function columns(spec) {
    return [data.t, ...spec.series.map(([name]) => data[name])];
  }

  function add(sample) {
    if (!data) return;
    for (const key of Object.keys(data)) data[key].push(sample[key] === undefined ? null : sample[key]);
    while (data.t.length && data.t[0] < sample.t - WINDOW_S) for (const key of Object.keys(data)) data[key].shift();
    for (const c of charts) c.plot.setData(columns(c.spec));
  }

  function text(id, value) { document.getElementById(id).textContent = value; }

  function status(s) {
    text("ready-state", s.ready ? "Ready" : "Not ready");
    document.getElementById("readiness").className = "card " + (s.ready ? "up" : "down");
    document.getElementById("reasons").replaceChildren(...s.reasons.map((r) => H.el("li", {}, r)));
    text("version", s.version);
    text("uptime", H.duration(s.uptime_s));
    text("model", s.model.name + (s.model.configured ? "" : " (not configured)"));
    text("policy", s.busy_policy);
    const st = s.store;
    text("store", !st.open ? "not open" : st.problem ? st.problem : st.writable ? "healthy" : "not writable");
    text("quarantined", s.quarantined);
    text("pool", s.pool.busy + " / " + s.pool.workers + " threads busy, " + s.pool.waiting + " waiting, " + s.pool.abandoned + " abandoned");
    text("sessions", s.sessions.active + " active, " + s.sessions.pending + " waiting");
    const lag = s.loop_lag_ms;
    text("lag", lag.last === null ? "–" : lag.last + " ms now, p99 " + lag.p99 + " ms, max " + lag.max + " ms");
    const cards = Object.entries(s.platforms).map(([name, p]) =>
      H.el("div", { class: "card platform " + (p.ready ? "up" : "down"), "data-platform": name, "data-ready": String(p.ready) },
        H.el("h3", {}, name), H.el("p", { class: "state" }, p.ready ? "up" : "down"), H.el("p", { class: "detail" }, p.detail || "")));
    document.getElementById("platforms").replaceChildren(...cards);
    // MCP servers: shown only when the config names one
    const servers = Object.entries(s.mcp || {});
    document.getElementById("mcp-section").hidden = servers.length === 0;
    document.getElementById("mcp").replaceChildren(...servers.map(([name, m]) =>
      H.el("div", { class: "card platform " + (m.state === "failing" ? "down" : "up"), "data-mcp": name, "data-state": m.state },
        H.el("h3", {}, name), H.el("p", { class: "state" }, m.state + " (" + m.transport + ", " + m.tools.length + " tools)"),
        H.el("p", { class: "detail" }, m.last_error || ""))));
  }

  H.stream("overview", { series: build, sample: add, status });
})();
