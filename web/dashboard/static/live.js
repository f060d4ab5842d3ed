// live.js keeps a dashboard page current without a reload: every few
// seconds it fetches the page again and swaps in its <main>, and the
// nav's fleet state (#fleet-state) with it, so a node cut off from NATS
// shows it on whatever page is open. A page whose session ended comes
// back as the sign-in page, and is then reloaded.
(function () {
  "use strict";
  var main = document.querySelector("main[data-live]");
  if (!main) return;
  var busy = false;
  setInterval(function () {
    if (busy || document.hidden) return;
    busy = true;
    fetch(location.href, { credentials: "same-origin", headers: { "X-Live": "1" } })
      .then(function (r) {
        if (r.redirected || !r.ok) { location.reload(); return null; }
        return r.text();
      })
      .then(function (text) {
        if (!text) return;
        var doc = new DOMParser().parseFromString(text, "text/html");
        var next = doc.querySelector("main[data-live]");
        if (next) main.innerHTML = next.innerHTML;
        var state = document.getElementById("fleet-state"), nextState = doc.getElementById("fleet-state");
        if (state && nextState) state.outerHTML = nextState.outerHTML;
      })
      .catch(function () {})
      .then(function () { busy = false; });
  }, 3000);
})();
