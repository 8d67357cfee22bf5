/* migronaut UI: what both pages share — API calls, DOM building, formatting, the sparkline.
 *
 * No framework and no build step. Text goes into the DOM through textContent
 * only, never innerHTML, so nothing the API returns is ever parsed as HTML.
 * Requests carry the Airflow sign-in cookie (same origin), which the API
 * accepts as Airflow's own API does.
 */
"use strict";

window.Migronaut = (function () {
  const body = document.body;
  const API = body.dataset.api;
  const PREFIX = body.dataset.prefix;
  const TARGET = body.dataset.target || "default";
  const SVG = "http://www.w3.org/2000/svg";
  const POLL_MS = 2000;

  class ApiError extends Error {
    constructor(status, payload) {
      super((payload && payload.message) || "HTTP " + status);
      this.status = status;
      this.code = (payload && payload.code) || "HTTP_" + status;
      this.context = (payload && payload.context) || {};
    }
  }

  /* Call the JSON API; resolves to the parsed body, rejects with an ApiError. */
  async function api(path, options) {
    const init = Object.assign({ credentials: "same-origin", cache: "no-store" }, options || {});
    init.headers = Object.assign({ Accept: "application/json" }, init.headers || {});
    const response = await fetch(withTarget(API + path), init);
    let payload = null;
    try {
      payload = await response.json();
    } catch (ignored) {
      payload = null;
    }
    if (!response.ok) throw new ApiError(response.status, payload);
    return payload;
  }

  function post(path, data) {
    return api(path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(data),
    });
  }

  /* el("td", {class: "num", title: "x"}, ["text", childNode]) */
  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "text") node.textContent = String(value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children || []) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function setText(root, selector, value) {
    const node = root.querySelector(selector);
    if (node && node.textContent !== String(value)) node.textContent = String(value);
    return node;
  }

  function percentText(progress) {
    const value = progress && progress.percent;
    return (value === null || value === undefined ? 0 : Math.floor(value)) + "%";
  }

  function barWidth(progress) {
    const value = progress && progress.percent;
    return Math.max(0, Math.min(100, value || 0)) + "%";
  }

  function count(value) {
    return value === null || value === undefined ? "–" : Number(value).toLocaleString();
  }

  // A pass's estimate: "≥" when its count was capped, "≈" when it was sampled.
  function estimate(progress) {
    const mark = progress.at_least ? "≥ " : progress.approximate ? "≈ " : "";
    return mark + count(progress.estimate);
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "–";
    let left = Math.max(0, Math.round(seconds));
    const hours = Math.floor(left / 3600);
    left -= hours * 3600;
    const minutes = Math.floor(left / 60);
    const secs = left - minutes * 60;
    if (hours) return hours + "h " + minutes + "m";
    if (minutes) return minutes + "m " + secs + "s";
    return secs + "s";
  }

  // A running migration's ETA (its low–high range when told); outside every maintenance
  // window, what it waits for.
  function eta(m) {
    if (m.status !== "running") return "–";
    if (m.window && !m.window.open && m.held) return m.held;
    const range = m.eta_range;
    if (range && range.low_seconds != null && range.high_seconds != null) {
      return duration(range.low_seconds) + " – " + duration(range.high_seconds);
    }
    return duration(m.eta_seconds);
  }

  function rate(value) {
    if (value === null || value === undefined) return "–";
    return (value < 10 ? value.toFixed(1) : Math.round(value).toLocaleString()) + " docs/s";
  }

  function when(iso) {
    if (!iso) return "–";
    const at = new Date(iso);
    return isNaN(at) ? iso : at.toLocaleString();
  }

  /* A small inline SVG line of docs/second over the sampled window. */
  function sparkline(series, width, height) {
    width = width || 120;
    height = height || 24;
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "sparkline");
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    svg.setAttribute("role", "img");
    const points = (series || []).map((point) => point.docs_per_second);
    const title = document.createElementNS(SVG, "title");
    title.textContent = points.length
      ? "docs/s, last " + points.length + " samples; now " + rate(points[points.length - 1])
      : "collecting samples…";
    svg.append(title);
    const base = document.createElementNS(SVG, "line");
    base.setAttribute("x1", 0);
    base.setAttribute("x2", width);
    base.setAttribute("y1", height - 1);
    base.setAttribute("y2", height - 1);
    base.setAttribute("class", "baseline");
    svg.append(base);
    if (points.length < 2) return svg;
    const top = Math.max(1, ...points);
    const step = width / (points.length - 1);
    const coords = points.map(
      (value, index) =>
        (index * step).toFixed(1) + "," + (height - 1 - (value / top) * (height - 3)).toFixed(1)
    );
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", coords.join(" "));
    line.setAttribute("class", "line");
    svg.append(line);
    return svg;
  }

  function showError(node, error) {
    if (!node) return;
    node.replaceChildren();
    node.append(error.message || String(error));
    const login = error.context && error.context.login_url;
    if (login) {
      node.append(" ", el("a", { href: login, target: "_top", text: "Sign in again" }));
    }
    node.hidden = false;
  }

  function clearError(node) {
    if (node && !node.hidden) {
      node.hidden = true;
      node.replaceChildren();
    }
  }

  /* Run `task` now and every POLL_MS, one at a time, not while the tab is hidden. */
  function poll(task) {
    let running = false;
    async function tick() {
      if (running || document.hidden) return;
      running = true;
      try {
        await task();
      } finally {
        running = false;
      }
    }
    tick();
    setInterval(tick, POLL_MS);
    document.addEventListener("visibilitychange", tick);
    return tick;
  }

  function stamp(node) {
    if (node) node.textContent = "updated " + new Date().toLocaleTimeString();
  }

  /* How a migration rewrites (the API's runs_as), in words for a tooltip. */
  const MODES = {
    python: "Python: migrate / migrate_batch run in the lanes, each write guarded",
    step: "Step: step(ctx) runs with checkpoints",
    update: "Update pipeline: each batch is one server-side update_many",
  };

  function mode(m) {
    const name = m.runs_as || m.mode || "–";
    return { text: name, title: MODES[name] || "" };
  }

  /* A URL of this app for the page's target (the default target's stay as they were). */
  function withTarget(url) {
    if (TARGET === "default") return url;
    return url + (url.includes("?") ? "&" : "?") + "target=" + encodeURIComponent(TARGET);
  }

  function migrationUrl(name) {
    return withTarget(PREFIX + "/migrations/" + encodeURIComponent(name));
  }

  return {
    ApiError,
    api,
    post,
    el,
    setText,
    percentText,
    barWidth,
    count,
    estimate,
    duration,
    eta,
    rate,
    when,
    sparkline,
    showError,
    clearError,
    poll,
    stamp,
    mode,
    migrationUrl,
  };
})();
