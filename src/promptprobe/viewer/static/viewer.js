// probe view: live pages without a reload. Every few seconds the page asks the server for itself
// again and swaps in each region marked data-live whose content changed (rendered by the server,
// escaped there: nothing here builds markup from data). Polling stops where the page says 0.
(function () {
  "use strict";
  var every = Number(document.body.getAttribute("data-poll") || 0);
  var status = document.getElementById("live-status");
  if (!every || !window.fetch || !window.DOMParser) {
    return;
  }
  var busy = false;

  function say(text) {
    if (status) {
      status.textContent = text;
    }
  }

  function swap(html) {
    var next = new DOMParser().parseFromString(html, "text/html");
    var changed = 0;
    document.querySelectorAll("[data-live][id]").forEach(function (old) {
      var fresh = next.getElementById(old.id);
      if (fresh && fresh.innerHTML !== old.innerHTML) {
        old.replaceWith(document.importNode(fresh, true));
        changed += 1;
      }
    });
    return changed;
  }

  function tick() {
    if (busy || document.hidden) {
      return;
    }
    busy = true;
    fetch(window.location.href, { cache: "no-cache", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("the server answered " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        swap(html);
        say("live");
      })
      .catch(function (error) {
        say("live updates paused (" + error.message + "); retrying");
      })
      .then(function () {
        busy = false;
      });
  }

  say("live");
  window.setInterval(tick, every);
})();
