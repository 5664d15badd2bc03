// kvmesh console: keeps a server-rendered page live (no framework, no build step).
//
// The page names what it shows (<main data-stream="PREFIX">). This script follows the agent's
// GET /stream for that prefix; on any event it asks the server for the same URL again with
// fragment=1 (at most every REFRESH_MS) and swaps the <main> content: the server renders,
// pages and filters; the browser only swaps HTML. Buttons with data-post send a POST carrying
// the session's CSRF token. When the stream breaks the page says so and reconnects by itself.
"use strict";

(function () {
  const REFRESH_MS = 250;
  const RETRY_MS = 2000;
  const main = document.querySelector("main");
  const banner = document.getElementById("connection");
  const notice = document.getElementById("notice");
  const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  let source = null;
  let timer = null;
  let inFlight = false;
  let again = false;

  function say(text, kind) {
    notice.textContent = text;
    notice.dataset.kind = kind || "info";
  }

  function connected(yes) {
    document.body.dataset.connected = yes ? "yes" : "no";
    banner.hidden = yes;
  }

  async function refresh() {
    if (inFlight) { again = true; return; }
    inFlight = true;
    try {
      const url = new URL(window.location.href);
      url.searchParams.set("fragment", "1");
      const resp = await fetch(url, { credentials: "same-origin", cache: "no-store" });
      if (resp.redirected || resp.status === 401 || resp.status === 303) {
        window.location.assign("/ui/login");
        return;
      }
      if (resp.ok) {
        const focused = document.activeElement && document.activeElement.id;
        main.innerHTML = await resp.text();
        if (focused) {
          const target = document.getElementById(focused);
          if (target) target.focus();
        }
        main.dataset.updated = String(Date.now());
      }
    } catch (err) {
      connected(false);
    } finally {
      inFlight = false;
      if (again) { again = false; schedule(); }
    }
  }

  function schedule() {
    if (timer === null) {
      timer = setTimeout(function () { timer = null; refresh(); }, REFRESH_MS);
    }
  }

  function follow() {
    const prefix = main.dataset.stream;
    if (prefix === undefined) return;
    source = new EventSource("/stream?prefix=" + encodeURIComponent(prefix));
    source.onopen = function () {
      const wasDown = document.body.dataset.connected === "no";
      connected(true);
      if (wasDown) refresh();  // what changed while we were away
    };
    for (const kind of ["value", "tombstone", "expired", "refresh"]) {
      source.addEventListener(kind, function (ev) {
        if (kind === "refresh") return;  // a TTL refresh changes nothing shown
        schedule();
      });
    }
    source.addEventListener("dropped", function () { source.close(); retry(); });
    source.onerror = function () {
      connected(false);
      if (source.readyState === EventSource.CLOSED) retry();
    };
  }

  function retry() {
    setTimeout(function () {
      if (source) source.close();
      follow();
    }, RETRY_MS);
  }

  document.addEventListener("click", async function (ev) {
    const button = ev.target.closest("button[data-post]");
    if (!button) return;
    ev.preventDefault();
    const what = button.dataset.confirm;
    if (what && !window.confirm(what)) return;
    button.disabled = true;
    try {
      const resp = await fetch(button.dataset.post, {
        method: "POST", credentials: "same-origin",
        headers: { "X-CSRF-Token": csrf, "Accept": "application/json" },
      });
      let body = {};
      try { body = await resp.json(); } catch (err) { body = {}; }
      if (resp.ok) {
        say((button.dataset.done || "Done") + ".", "ok");
      } else {
        say("Refused (HTTP " + resp.status + "): " + (body.error || resp.statusText), "error");
      }
    } catch (err) {
      say("The agent did not answer: " + err, "error");
    } finally {
      button.disabled = false;
      refresh();
    }
  });

  connected(true);
  follow();
})();
