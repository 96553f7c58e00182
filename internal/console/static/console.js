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

  // Live refresh: reload the page every data-refresh seconds while the
  // "live" box is ticked (remembered for this tab).
  var seconds = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  var live = document.getElementById("live");
  if (seconds > 0 && live) {
    var timer = null;
    var set = function () {
      if (timer) { clearTimeout(timer); timer = null; }
      try { sessionStorage.setItem("repolock-live", live.checked ? "1" : ""); } catch (e) { /* storage off */ }
      if (live.checked) { timer = setTimeout(function () { location.reload(); }, seconds * 1000); }
    };
    try { live.checked = sessionStorage.getItem("repolock-live") === "1"; } catch (e) { /* storage off */ }
    live.addEventListener("change", set);
    set();
  }
})();
