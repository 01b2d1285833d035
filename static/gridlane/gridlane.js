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

// Profiles (IT's ready-made sizes) on the submit forms: the chosen one's numbers go into the fields it stands
// for, which the style sheet hides unless "Custom" is chosen; a profile that says how long fixes that too.
// The server takes the profile's own numbers whatever the fields say: this only keeps the page truthful.
function applyProfile(form) {
  var chosen = form.querySelector("input[name=profile]:checked");
  if (!chosen) return;
  var custom = chosen.value === "custom";
  form.querySelectorAll("input[name=runtime_limit_minutes], input[name=lease_hours]").forEach(function (f) {
    f.readOnly = false;
  });
  if (custom) return;
  Object.keys(chosen.dataset).forEach(function (key) {
    var name = key.replace(/[A-Z]/g, function (c) { return "_" + c.toLowerCase(); });
    var field = form.querySelector("[name=" + name + "]");
    if (!field) return;
    field.value = chosen.dataset[key];
    if (name === "runtime_limit_minutes" || name === "lease_hours") field.readOnly = true;
  });
}
document.addEventListener("change", function (event) {
  if (event.target.name === "profile" && event.target.form) applyProfile(event.target.form);
});
function applyProfiles() {
  document.querySelectorAll("form").forEach(applyProfile);
}
document.addEventListener("DOMContentLoaded", applyProfiles);
document.addEventListener("htmx:afterSwap", applyProfiles);

// A request htmx sent that failed (the server's 5xx, a refusal other than a form's 422, or no answer at all)
// swaps nothing (see the htmx-config in base.html): say so where the person acted, at the top of the form
// (else of the page), with the request id the server's logs carry, so that Submit never seems to do nothing.
function showRequestError(elt, text) {
  var where = (elt && elt.closest && elt.closest("form")) || document.getElementById("main") || document.body;
  var note = where.querySelector(":scope > .request-error");
  if (!note) {
    note = document.createElement("p");
    note.className = "flash error request-error";
    note.setAttribute("role", "alert");
    note.setAttribute("tabindex", "-1");
    where.insertBefore(note, where.firstChild);
  }
  note.textContent = text;
  if (where.tagName === "FORM") note.focus();
}
document.addEventListener("htmx:responseError", function (event) {
  var xhr = event.detail.xhr;
  var id = xhr.getResponseHeader("X-Request-ID");
  var said = (xhr.responseText || "").trim();
  var text;
  if (xhr.status >= 500) {
    text = "Something went wrong on Gridlane's side (error " + xhr.status + ") and this may not have been done. " +
      "Check, then try again in a moment; if it happens again, give IT the request id " + (id || "shown in the server's log") + ".";
  } else {
    // A refusal that says why in a line of plain text (e.g. 403 "You may not cancel this workload.").
    text = said && said.length < 300 && said.indexOf("<") < 0 ? said : "Gridlane refused this request (error " + xhr.status + ").";
    if (id) text += " (request id " + id + ")";
  }
  showRequestError(event.detail.elt, text);
});
document.addEventListener("htmx:sendError", function (event) {
  showRequestError(event.detail.elt, "Gridlane did not answer: check your connection and try again.");
});

// Times the server writes in UTC (<time class="local">, see the `local` filter) in the viewer's own time zone;
// the UTC time stays on hover. Every other <time> gets its UTC time on hover too.
function localTimes(root) {
  (root || document).querySelectorAll("time[datetime]").forEach(function (el) {
    var when = new Date(el.getAttribute("datetime"));
    if (isNaN(when)) return;
    if (!el.title) el.title = when.toISOString().slice(0, 16).replace("T", " ") + " UTC";
    if (!el.classList.contains("local") || el.dataset.shown) return;
    var options = el.dataset.form === "long" ? { dateStyle: "medium", timeStyle: "short" } : { timeStyle: "short" };
    el.textContent = when.toLocaleString([], options);
    el.dataset.shown = "1";
  });
}
document.addEventListener("DOMContentLoaded", function () { localTimes(document); });
document.addEventListener("htmx:afterSwap", function (event) { localTimes(event.detail.elt.parentNode || document); });

// A page answered to a POST that a browser cannot open again (a refused Relaunch) names the address it stands
// for; the address bar shows that one, so a reload or a bookmark opens the same form.
document.addEventListener("DOMContentLoaded", function () {
  var page = document.querySelector("[data-address]");
  if (page && window.history && history.replaceState) history.replaceState(null, "", page.dataset.address);
});

// Phones: the sections sit behind a Menu button that opens them as a list, every one in view (without this
// script they stay a scrolling line, as the style sheet lays them out).
document.addEventListener("DOMContentLoaded", function () {
  var toggle = document.querySelector(".menu-toggle");
  var top = document.querySelector("header.top");
  if (!toggle || !top) return;
  toggle.hidden = false;
  top.classList.add("has-menu");
  toggle.addEventListener("click", function () {
    var open = toggle.getAttribute("aria-expanded") !== "true";
    toggle.setAttribute("aria-expanded", String(open));
    top.classList.toggle("menu-open", open);
  });
});
