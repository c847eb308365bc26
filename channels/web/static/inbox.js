// Refreshes the inbox list in place every 30 seconds while the tab is visible. The inbox works
// without it; it only saves a reload. It leaves the list alone while focus is inside it (a
// keyboard user would lose their place), and stops once the session has ended (401): those
// refreshes do not count as activity, so an open tab does not keep a session alive.
(function () {
  "use strict";
  var list = document.getElementById("inbox");
  if (!list || !window.fetch || !window.DOMParser) return;
  var url = list.getAttribute("data-refresh");
  var timer = null;

  function refresh() {
    if (document.hidden || list.contains(document.activeElement)) return;
    // Requests picked for a bulk decision stay picked: no refresh while any is.
    if (list.querySelector('input[name^="pick."]:checked')) return;
    fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (response.status === 401) {
          window.clearInterval(timer);
          return null;
        }
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("inbox");
        if (fresh && fresh.innerHTML !== list.innerHTML) {
          list.replaceChildren.apply(list, Array.prototype.slice.call(fresh.childNodes));
        }
      })
      .catch(function () { /* offline for a moment: the next tick tries again */ });
  }

  timer = window.setInterval(refresh, 30000);
})();
