// live.js keeps a dashboard page current without a reload: every few
// seconds it fetches the page again and swaps in its <main>. A page whose
// session ended comes back as the sign-in page, and is then reloaded.
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
        var next = new DOMParser().parseFromString(text, "text/html").querySelector("main[data-live]");
        if (next) main.innerHTML = next.innerHTML;
      })
      .catch(function () {})
      .then(function () { busy = false; });
  }, 3000);
})();
