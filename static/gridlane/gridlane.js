// Gridlane's one small script (htmx does the rest). After htmx swaps in a form that came back with errors,
// focus goes to its first invalid field, so a keyboard or screen-reader user lands on what to fix.
document.addEventListener("htmx:afterSwap", function (event) {
  var root = event.detail.elt;
  if (!root || !root.querySelector) return;
  var invalid = root.matches && root.matches("form") ? root : root.querySelector("form");
  if (!invalid) return;
  var field = invalid.querySelector(".invalid input, .invalid select, .invalid textarea");
  if (!field) {
    // A form-wide error (e.g. too many submissions): say it where focus goes.
    field = invalid.querySelector("[role=alert]");
    if (field) field.setAttribute("tabindex", "-1");
  }
  if (field) field.focus();
});
