/* migronaut UI, detail page: one migration, refreshed every two seconds, and its controls.
 *
 * A control button opens the confirm dialog, which asks for a reason (recorded
 * with the signed-in user) and, for destructive actions, warns first. After an
 * action the page refreshes at once; a failed action shows its message in
 * [data-role="error"].
 */
"use strict";

(function () {
  const M = window.Migronaut;
  const name = document.body.dataset.name;
  const path = "/migrations/" + encodeURIComponent(name);
  const summary = document.querySelector("section.summary");
  const errorBox = document.querySelector('[data-role="error"]');
  const notice = document.querySelector('[data-role="notice"]');
  const updated = document.querySelector('[data-role="updated"]');
  const dialog = document.querySelector('dialog[data-role="confirm"]');
  const form = dialog.querySelector('[data-role="confirm-form"]');
  const reason = dialog.querySelector('textarea[name="reason"]');
  const repin = dialog.querySelector('input[name="repin"]');
  const failedOnly = dialog.querySelector('input[name="failed_only"]');
  const FAILED_SHOWN = 100;
  const submit = dialog.querySelector('button[data-role="submit"]');
  let pending = null; // the button whose action the dialog confirms
  let pollFailed = false; // the error shown is a refresh's (cleared by the next good one)

  function fillSummary(m) {
    const status = M.setText(summary, '[data-field="status"]', m.status);
    status.className = "status s-" + m.status;
    M.setText(summary, '[data-field="description"]', m.description || "");
    M.setText(summary, '[data-field="percent"]', M.percentText(m.progress));
    summary.querySelector('[data-role="fill"]').style.width = M.barWidth(m.progress);
    M.setText(summary, '[data-field="processed"]', String(m.processed));
    const estimate = M.estimate(m.progress);
    M.setText(summary, '[data-field="estimate"]', estimate);
    M.setText(summary, '[data-field="eta"]', M.eta(m));
    M.setText(summary, '[data-field="pass"]', m.pass);
    const lanes = m.max_parallel ? m.live_leases + " / " + m.max_parallel : m.live_leases;
    M.setText(summary, '[data-field="lanes"]', lanes);
    M.setText(summary, '[data-field="throughput"]', M.rate(m.throughput.docs_per_second));
    summary.querySelector('[data-role="sparkline"]').replaceChildren(
      M.sparkline(m.throughput.series, 160, 28)
    );
    M.setText(summary, '[data-field="failed"]', M.count(m.failed_documents));
    M.setText(summary, '[data-field="collection"]', m.collection || "–");
    const shown = M.mode(m);
    M.setText(summary, '[data-field="mode"]', shown.text).title = shown.title;
    M.setText(summary, '[data-field="phase"]', m.phase || "–");
    M.setText(summary, '[data-field="validator"]', validatorText(m.validator));
    M.setText(summary, '[data-field="canary"]', canaryText(m.canary));
    M.setText(summary, '[data-field="waits"]', m.waits_for.length ? m.waits_for.join(", ") : "–");
    M.setText(summary, '[data-field="last_error"]', m.last_error || m.held || "–");
    document.querySelector('[data-role="readonly"]').hidden = m.permissions.can_control;
  }

  // The finalize validator in words: its phase, the soak's clean checks and old-shape counts.
  function validatorText(v) {
    if (!v) return "–";
    if (v.phase === "error") return "enforced (error)";
    if (v.phase === "recorded") return "about to warn";
    const seen = v.old_shape_seen ? ", " + M.count(v.old_shape_seen) + " old-shape seen" : "";
    return "soaking (warn): " + v.clean_passes + " clean check(s)" + seen;
  }

  // The canary in words: its phase, and why a failed check or a rejection paused it.
  function canaryText(c) {
    if (!c) return "–";
    if (c.failed) return "paused: check " + c.failed.check + " failed: " + c.failed.reason;
    if (c.rejected) return "rejected by " + (c.rejected.requested_by || "?") + ": " + (c.rejected.reason || "");
    if (c.phase === "awaiting_approval") return "passed its checks; awaiting approval";
    if (c.phase === "soaking") {
      const old = c.counts ? ", " + M.count(c.counts.old) + " old-shape in subset" : "";
      return "soaking: " + c.clean_passes + " clean check(s)" + old;
    }
    return c.phase;
  }

  function partitionRow(p) {
    const c = p.counters;
    const scope = [p.scope.kind, p.scope.bracket, p.scope.group].filter(Boolean).join(" · ");
    const lease = p.lease ? p.lease.owner + " (slot " + p.lease.slot + ")" : "–";
    const throttle = p.throttle
      ? "batch " + M.count(p.throttle.batch_size) + ", pause " + M.count(p.throttle.pause_ms) + " ms"
      : "–";
    return M.el("tr", { "data-partition": p.index }, [
      M.el("td", { class: "num", text: p.index }),
      M.el("td", {}, [M.el("span", { class: "status s-" + p.status, text: p.status })]),
      M.el("td", { text: scope || "–" }),
      M.el("td", { text: p.cursor }),
      M.el("td", { class: "num", text: M.count(p.scanned) }),
      M.el("td", { class: "num", text: M.count(c.migrated || 0) }),
      M.el("td", { class: "num", text: M.count(c.skipped || 0) }),
      M.el("td", { class: "num", text: M.count(c.conflicts || 0) }),
      M.el("td", { class: "num", text: M.count(p.failed_documents) }),
      M.el("td", { class: "num", text: M.count(p.slice_failures) }),
      M.el("td", { text: lease, title: p.lease ? "renewed " + M.when(p.lease.renewed_at) : null }),
      M.el("td", { text: throttle }),
      M.el("td", { class: "error-text", text: p.last_error || "–", title: p.last_error }),
      M.el("td", { text: M.when(p.updated_at) }),
    ]);
  }

  function fillPartitions(m) {
    const rows = m.partitions.map(partitionRow);
    if (!rows.length) {
      rows.push(M.el("tr", { class: "placeholder" }, [M.el("td", { colspan: 14, text: "Not planned yet." })]));
    }
    document.querySelector('[data-role="partitions"]').replaceChildren(...rows);
    const counts = Object.entries(m.partition_counts).map(([status, n]) => n + " " + status);
    M.setText(document, '[data-field="partition_counts"]', counts.join(", "));
  }

  function move(entry) {
    return entry.from ? " " + entry.from + " → " + entry.to : " → " + entry.to;
  }

  function historyItem(entry) {
    const details = Object.entries(entry.details || {}).map(([key, value]) => key + ": " + value);
    return M.el("li", {}, [
      M.el("time", { datetime: entry.at, text: M.when(entry.at) }),
      " ",
      M.el("strong", { class: "action", text: entry.action || "?" }),
      entry.to ? M.el("span", { class: "move", text: move(entry) }) : null,
      " by ",
      M.el("span", { class: "by", text: entry.by || "migronaut" }),
      entry.reason ? ": " : null,
      entry.reason ? M.el("q", { class: "reason", text: entry.reason }) : null,
      details.length ? M.el("span", { class: "sub", text: " (" + details.join(", ") + ")" }) : null,
    ]);
  }

  function fillHistory(m) {
    const items = m.history.slice().reverse().map(historyItem);
    document.querySelector('[data-role="history"]').replaceChildren(...items);
  }

  function fact(label, value) {
    return M.el("div", {}, [M.el("dt", { text: label }), M.el("dd", { text: value })]);
  }

  function fillThrottle(m) {
    const t = m.throttle;
    const facts = [
      fact("Batch size", M.count(t.batch_size)),
      fact("Pause before each batch", M.count(t.pause_ms) + " ms"),
      fact("Max replication lag", t.max_lag_ms === null ? "ignored" : M.count(t.max_lag_ms) + " ms"),
      fact(
        "Adaptive (AIMD)",
        t.adaptive
          ? "batches " + t.adaptive.min_batch_size + "–" + t.adaptive.max_batch_size +
              ", target " + t.adaptive.target_latency_ms + " ms"
          : "off"
      ),
    ];
    t.lanes.forEach((lane, index) =>
      facts.push(fact("Lane " + (index + 1), "batch " + lane.batch_size + ", pause " + lane.pause_ms + " ms"))
    );
    document.querySelector('[data-role="throttle"]').replaceChildren(...facts);
  }

  function fillDrift(m) {
    const box = document.querySelector('[data-role="drift"]');
    const parts = [M.el("p", { text: "Reopened " + m.drift.reopened + " time(s)." })];
    if (!m.drift.watch.length) parts.push(M.el("p", { class: "sub", text: "No change-stream watcher." }));
    for (const w of m.drift.watch) {
      const counters = Object.entries(w.counters).map(([k, v]) => k + " " + v).join(", ");
      parts.push(
        M.el("dl", { class: "facts small", "data-watch": w.collection }, [
          fact("Watcher", w.collection + ": " + w.state + (w.fresh ? " (fresh)" : "")),
          fact("Leader", w.leader ? (w.leader.host || "?") + " pid " + (w.leader.pid || "?") : "–"),
          fact("Counters", counters || "–"),
          fact("Last event", M.when(w.last_event_at)),
          fact("Last error", w.last_error || "–"),
        ])
      );
    }
    box.replaceChildren(...parts);
  }

  function fillFailures(m) {
    const items = m.failure_reasons.map((f) =>
      M.el("li", { text: (f.reason || "?") + (f.error ? ": " + f.error : "") })
    );
    if (!items.length) items.push(M.el("li", { class: "sub", text: "None." }));
    document.querySelector('[data-role="failures"]').replaceChildren(...items);
  }

  function failedRow(d) {
    const id = typeof d.id === "string" ? d.id : JSON.stringify(d.id);
    return M.el("tr", {}, [
      M.el("td", { class: "mono", text: id }),
      M.el("td", { text: (d.reason || "?") + (d.retrying ? " (retrying)" : "") }),
      M.el("td", { class: "num", text: d.code == null ? "–" : String(d.code) }),
      M.el("td", { text: d.error || "details no longer kept" }),
      M.el("td", { class: "num", text: d.generation == null ? "–" : String(d.generation) }),
      M.el("td", { text: d.at || "–" }),
    ]);
  }

  async function fillFailed(m) {
    const body = document.querySelector('[data-role="failed"]');
    const total = document.querySelector('[data-field="failed_total"]');
    if (!m.failed_documents) {
      total.textContent = "";
      body.replaceChildren(M.el("tr", { class: "placeholder" }, [M.el("td", { colspan: "6", text: "None." })]));
      return;
    }
    const page = await M.api(path + "/failed?limit=" + FAILED_SHOWN);
    total.textContent = page.total > page.documents.length
      ? "(" + page.documents.length + " of " + page.total + ")"
      : "(" + page.total + ")";
    body.replaceChildren(...page.documents.map(failedRow));
  }

  async function refresh() {
    try {
      const m = await M.api(path);
      fillSummary(m);
      fillPartitions(m);
      fillHistory(m);
      fillThrottle(m);
      fillDrift(m);
      fillFailures(m);
      await fillFailed(m);
      M.stamp(updated);
      if (pollFailed) M.clearError(errorBox);
      pollFailed = false;
    } catch (error) {
      M.showError(errorBox, error);
      pollFailed = true;
    }
  }

  function openDialog(button) {
    pending = button;
    const destructive = button.dataset.destructive === "true";
    M.setText(dialog, '[data-role="confirm-title"]', button.dataset.label + " " + name);
    M.setText(dialog, '[data-role="confirm-help"]', button.dataset.help);
    dialog.querySelector('[data-role="warning"]').hidden = !destructive;
    const action = button.dataset.action;
    dialog.querySelector('[data-role="repin-option"]').hidden = !action.startsWith("retry");
    dialog.querySelector('[data-role="failed-only-option"]').hidden = action !== "retry";
    repin.checked = false;
    failedOnly.checked = false;
    submit.textContent = destructive ? "Yes, " + button.dataset.label.toLowerCase() : button.dataset.label;
    submit.className = destructive ? "danger" : "primary";
    dialog.showModal();
    reason.focus();
  }

  function describe(result) {
    let text = result.action + " by " + result.requested_by + ": " + result.applied + ", now " + result.status;
    if (result.failed != null) text += "; retries " + result.failed + " failed document(s) only";
    if (result.dag_run) text += "; started " + result.dag_run.dag_id + " (" + result.dag_run.run_id + ")";
    if (result.dag_run && result.dag_run.dag_paused) text += " — the DAG is paused in Airflow";
    if (result.dag_run_note) text += "; " + result.dag_run_note;
    return text;
  }

  async function confirmAction(event) {
    event.preventDefault();
    if (!pending) return;
    const action = pending.dataset.action;
    submit.disabled = true;
    const payload = { reason: reason.value };
    if (repin.checked && action.startsWith("retry")) payload.repin = true;
    if (failedOnly.checked && action === "retry") payload.failed_only = true;
    try {
      const result = await M.post(path + "/actions/" + action, payload);
      M.clearError(errorBox);
      notice.textContent = describe(result);
      notice.hidden = false;
      reason.value = "";
    } catch (error) {
      notice.hidden = true;
      M.showError(errorBox, error);
      pollFailed = false;
    } finally {
      submit.disabled = false;
      pending = null;
      dialog.close();
    }
    await refresh();
  }

  for (const button of document.querySelectorAll("button[data-action]")) {
    button.addEventListener("click", () => openDialog(button));
  }
  form.addEventListener("submit", confirmAction);
  dialog.querySelector('[data-role="dismiss"]').addEventListener("click", () => dialog.close());
  dialog.addEventListener("close", () => {
    pending = null;
  });

  M.poll(refresh);
})();
