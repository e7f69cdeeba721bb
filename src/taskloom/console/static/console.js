// Live updates: the page's event stream says "changed" once the store moved
// past what the page shows; the page then fetches itself again and swaps in
// the regions marked data-live-region, keeping which <details> were open.
// Everything else (forms being typed into) stays as it is.
(function () {
  "use strict";
  const url = document.body.dataset.live;
  const state = document.getElementById("live-state");
  if (!url || !window.EventSource) return;

  let busy = false;
  let again = false;

  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const answer = await fetch(window.location.href, { credentials: "same-origin" });
      if (!answer.ok) return;
      const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
      for (const region of document.querySelectorAll("[data-live-region]")) {
        const replacement = fresh.getElementById(region.id);
        if (!replacement) continue;
        const open = new Set(
          Array.from(region.querySelectorAll("details[open][id]"), (d) => d.id)
        );
        for (const d of replacement.querySelectorAll("details[id]")) {
          if (open.has(d.id)) d.open = true;
        }
        region.replaceWith(document.adoptNode(replacement));
      }
      document.title = fresh.title;
      if (state) state.textContent = "updated " + new Date().toLocaleTimeString();
    } finally {
      busy = false;
      if (again) { again = false; refresh(); }
    }
  }

  const source = new EventSource(url);
  source.addEventListener("changed", refresh);
  source.addEventListener("open", () => { if (state) state.dataset.connected = "yes"; });
})();
