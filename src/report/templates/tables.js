// Sorts a table by a header click and filters its rows by a text box. Without scripts the tables
// read the same, unsorted and unfiltered.
(function () {
  function key(cell) {
    var text = cell.textContent.trim();
    var number = parseFloat(text.replace(/[^0-9.eE+-].*$/, ""));
    return isNaN(number) ? text.toLowerCase() : number;
  }
  function sortBy(table, column, th) {
    var body = table.tBodies[0];
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[column]), y = key(b.cells[column]);
      var order = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : typeof x === "number" ? -1 : 1;
      return ascending ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  }
  function filterBox(table) {
    var input = document.createElement("input");
    input.type = "search";
    input.placeholder = "Filter rows";
    input.className = "filter";
    input.addEventListener("input", function () {
      var needle = input.value.toLowerCase();
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        row.hidden = needle !== "" && row.textContent.toLowerCase().indexOf(needle) < 0;
      });
    });
    table.parentNode.parentNode.insertBefore(input, table.parentNode);
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, column) {
      th.classList.add("sorts");
      th.title = "Sort by this column";
      th.addEventListener("click", function () { sortBy(table, column, th); });
    });
    if (table.tBodies[0].rows.length > 8) {
      filterBox(table);
    }
  });
})();
