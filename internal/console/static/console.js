// repolock console: progressive enhancements only. Every page works without
// this file. No inline scripts (the Content-Security-Policy forbids them).
(function () {
  "use strict";

  // Filter the rows of a table on this page: <input data-filter="tableId">.
  document.querySelectorAll("input[data-filter]").forEach(function (input) {
    var table = document.getElementById(input.getAttribute("data-filter"));
    if (!table) { return; }
    input.addEventListener("input", function () {
      var needle = input.value.trim().toLowerCase();
      table.querySelectorAll("tbody tr").forEach(function (row) {
        row.hidden = needle !== "" && row.textContent.toLowerCase().indexOf(needle) < 0;
      });
    });
  });

  // Live: while the "live" box is ticked (remembered for this tab), follow
  // the lock events (data-events: a Server-Sent Events URL) and reload the
  // page a second after a change, or else reload it every data-refresh
  // seconds.
  var seconds = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  var eventsURL = document.body.getAttribute("data-events") || "";
  var live = document.getElementById("live");
  if ((seconds > 0 || eventsURL) && live) {
    var timer = null;
    var source = null;
    var reloadSoon = function () {
      if (!timer) { timer = setTimeout(function () { location.reload(); }, 1000); }
    };
    var set = function () {
      if (timer) { clearTimeout(timer); timer = null; }
      if (source) { source.close(); source = null; }
      try { sessionStorage.setItem("repolock-live", live.checked ? "1" : ""); } catch (e) { /* storage off */ }
      if (!live.checked) { return; }
      if (eventsURL && window.EventSource) {
        source = new EventSource(eventsURL);
        source.addEventListener("change", reloadSoon);
      } else if (seconds > 0) {
        timer = setTimeout(function () { location.reload(); }, seconds * 1000);
      }
    };
    try { live.checked = sessionStorage.getItem("repolock-live") === "1"; } catch (e) { /* storage off */ }
    live.addEventListener("change", set);
    set();
  }
})();
