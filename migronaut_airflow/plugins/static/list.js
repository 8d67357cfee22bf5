/* migronaut UI, list page: every migration the user may read, refreshed every two seconds.
 *
 * Rows are updated in place (one <tr data-migration="name"> per migration), so
 * links and focus survive a refresh.
 */
"use strict";

(function () {
  const M = window.Migronaut;
  const tbody = document.querySelector('[data-role="migrations"]');
  const filter = document.querySelector('[data-role="status-filter"]');
  const errorBox = document.querySelector('[data-role="error"]');
  const updated = document.querySelector('[data-role="updated"]');

  function query() {
    return filter.value ? "?status=" + encodeURIComponent(filter.value) : "";
  }

  function newRow(name) {
    const link = M.el("a", { href: M.migrationUrl(name), class: "name", text: name });
    return M.el("tr", { "data-migration": name }, [
      M.el("td", {}, [
        link,
        " ",
        M.el("span", { class: "mode", "data-field": "mode" }),
        M.el("div", { class: "sub", "data-field": "description" }),
      ]),
      M.el("td", {}, [M.el("span", { class: "status", "data-field": "status" })]),
      M.el("td", { class: "wide" }, [
        M.el("div", { class: "progress" }, [
          M.el("div", { class: "bar" }, [M.el("div", { class: "fill", "data-role": "fill" })]),
          M.el("span", { class: "percent", "data-field": "percent", text: "0%" }),
        ]),
        M.el("div", { class: "sub", "data-field": "counts" }),
      ]),
      M.el("td", { "data-field": "eta" }),
      M.el("td", { class: "num", "data-field": "pass" }),
      M.el("td", { class: "num", "data-field": "lanes" }),
      M.el("td", { class: "throughput" }, [
        M.el("span", { "data-role": "sparkline" }),
        M.el("span", { class: "sub", "data-field": "throughput" }),
      ]),
      M.el("td", { class: "num", "data-field": "failed" }),
      M.el("td", { class: "error-text", "data-field": "last_error" }),
      M.el("td", { "data-field": "waits" }),
    ]);
  }

  function fill(row, m) {
    M.setText(row, '[data-field="description"]', m.description || "");
    const shown = M.mode(m);
    M.setText(row, '[data-field="mode"]', shown.text).title = shown.title;
    const status = M.setText(row, '[data-field="status"]', m.status);
    status.className = "status s-" + m.status;
    M.setText(row, '[data-field="percent"]', M.percentText(m.progress));
    row.querySelector('[data-role="fill"]').style.width = M.barWidth(m.progress);
    const estimate = M.estimate(m.progress);
    M.setText(row, '[data-field="counts"]', M.count(m.processed) + " / " + estimate);
    M.setText(row, '[data-field="eta"]', M.eta(m));
    M.setText(row, '[data-field="pass"]', m.pass);
    const lanes = m.max_parallel ? m.live_leases + " / " + m.max_parallel : m.live_leases;
    M.setText(row, '[data-field="lanes"]', lanes);
    row.querySelector('[data-role="sparkline"]').replaceChildren(M.sparkline(m.throughput.series));
    M.setText(row, '[data-field="throughput"]', M.rate(m.throughput.docs_per_second));
    M.setText(row, '[data-field="failed"]', M.count(m.failed_documents));
    const lastError = M.setText(row, '[data-field="last_error"]', m.last_error || m.held || "–");
    lastError.title = m.last_error || m.held || "";
    const waits = m.waits_for.length ? m.waits_for.join(", ") : "–";
    M.setText(row, '[data-field="waits"]', waits);
  }

  function render(list) {
    const rows = new Map();
    for (const row of tbody.querySelectorAll("tr[data-migration]")) {
      rows.set(row.dataset.migration, row);
    }
    for (const placeholder of tbody.querySelectorAll("tr.placeholder")) placeholder.remove();
    for (const m of list.migrations) {
      const row = rows.get(m.name) || newRow(m.name);
      rows.delete(m.name);
      fill(row, m);
      tbody.append(row); // (re)appending keeps the API's order
    }
    for (const gone of rows.values()) gone.remove();
    if (!list.migrations.length) {
      const text = filter.value
        ? "No background migration is " + filter.value + "."
        : "No background migration you may read is registered.";
      tbody.append(M.el("tr", { class: "placeholder" }, [M.el("td", { colspan: 10, text })]));
    }
  }

  async function refresh() {
    try {
      render(await M.api("/migrations" + query()));
      M.clearError(errorBox);
      M.stamp(updated);
    } catch (error) {
      M.showError(errorBox, error);
    }
  }

  filter.addEventListener("change", () => {
    const url = new URL(window.location.href);
    if (filter.value) url.searchParams.set("status", filter.value);
    else url.searchParams.delete("status");
    window.history.replaceState(null, "", url);
    refresh();
  });

  M.poll(refresh);
})();
