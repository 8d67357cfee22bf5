/* migronaut UI, list page: the target's brake (GET/POST /api/brake), refreshed with the page.
 *
 * Shown to users who may read the target's control DAG; the form to set and release
 * it to those who may edit it (the API's can_edit). Setting it asks for a reason and
 * takes an optional end time in the browser's time zone.
 */
"use strict";

(function () {
  const M = window.Migronaut;
  const panel = document.querySelector('[data-role="brake"]');
  const state = panel.querySelector('[data-role="brake-state"]');
  const form = panel.querySelector('[data-role="brake-form"]');
  const reason = form.querySelector('input[name="reason"]');
  const until = form.querySelector('input[name="until"]');
  const setButton = form.querySelector('[data-role="brake-set"]');
  const releaseButton = form.querySelector('[data-role="brake-release"]');
  const errorBox = panel.querySelector('[data-role="brake-error"]');
  const logList = panel.querySelector('[data-role="brake-log"]');

  function describe(brake) {
    if (!brake.on) return "Off: lanes run as their windows, budget and health allow.";
    let text = "On since " + M.when(brake.at) + " by " + (brake.requested_by || "?");
    if (brake.until) text += ", until " + M.when(brake.until);
    return text + ": every lane of this target holds.";
  }

  function entry(e) {
    return M.el("li", {}, [
      M.el("time", { datetime: e.at, text: M.when(e.at) }),
      " ",
      M.el("span", { class: "by", text: e.requested_by || "?" }),
      " " + e.action,
      e.until ? " until " + M.when(e.until) : null,
      e.reason ? ": " : null,
      e.reason ? M.el("q", { class: "reason", text: e.reason }) : null,
    ]);
  }

  function render(answer) {
    panel.hidden = false;
    panel.classList.toggle("on", Boolean(answer.brake.on));
    state.replaceChildren(
      M.el("strong", { text: answer.brake.on ? "Brake on. " : "" }),
      describe(answer.brake),
      answer.brake.on && answer.brake.reason ? " " : "",
      answer.brake.on && answer.brake.reason ? M.el("q", { text: answer.brake.reason }) : ""
    );
    form.hidden = !answer.can_edit;
    setButton.hidden = Boolean(answer.brake.on);
    releaseButton.hidden = !answer.brake.on;
    until.hidden = Boolean(answer.brake.on);
    logList.replaceChildren(...answer.log.slice().reverse().map(entry));
  }

  async function refresh() {
    try {
      render(await M.api("/brake"));
    } catch (error) {
      // No read access to the target's control DAG: the panel stays hidden.
      if (error.status !== 403) M.showError(errorBox, error);
    }
  }

  async function send(path, payload) {
    setButton.disabled = releaseButton.disabled = true;
    try {
      render(await M.post(path, payload));
      M.clearError(errorBox);
      reason.value = "";
      until.value = "";
    } catch (error) {
      M.showError(errorBox, error);
    } finally {
      setButton.disabled = releaseButton.disabled = false;
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const payload = { reason: reason.value };
    if (until.value) payload.until = new Date(until.value).toISOString();
    send("/brake", payload);
  });

  releaseButton.addEventListener("click", () => {
    if (!reason.reportValidity()) return;
    send("/brake/release", { reason: reason.value });
  });

  M.poll(refresh);
})();
