// Each cell of a console table names its column (data-label, from the
// table's own header), so that on a phone's width, where console.css draws
// every row as a block, a value still says what it is. Without this script
// the tables read the same, only without those names.
(function () {
  function label(root) {
    root.querySelectorAll("table.grid").forEach(function (table) {
      var names = [];
      table.querySelectorAll("thead tr:first-child > th").forEach(function (th) {
        var hidden = th.querySelector(".sr-only");
        var name = hidden && hidden.textContent.trim() === th.textContent.trim() ? "" : th.textContent.trim();
        for (var i = 0; i < th.colSpan; i++) names.push(name);
      });
      table.querySelectorAll("tbody > tr").forEach(function (row) {
        var column = 0;
        Array.prototype.forEach.call(row.children, function (cell) {
          if (names[column] && cell.colSpan === 1 && !cell.hasAttribute("data-label")) cell.setAttribute("data-label", names[column]);
          column += cell.colSpan;
        });
      });
    });
  }
  document.addEventListener("DOMContentLoaded", function () { label(document); });
  document.addEventListener("htmx:afterSettle", function (event) { label(event.target); });
})();
