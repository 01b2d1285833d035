// Draw every figure whose JSON sits in <script type="application/json" id="figure-NAME"> into #chart-NAME,
// on load and after each htmx swap (filters swap the dashboard in place).
(function () {
  function draw(root) {
    if (!window.Plotly) return;
    root.querySelectorAll("script[id^=\"figure-\"]").forEach(function (source) {
      var target = document.getElementById("chart-" + source.id.slice("figure-".length));
      if (!target || target.dataset.drawn) return;
      var figure = JSON.parse(source.textContent);
      // On a phone the toolbar would sit over the title: leave it out there (zoom by pinching still works).
      var narrow = window.matchMedia("(max-width: 640px)").matches;
      window.Plotly.react(target, figure.data, figure.layout,
        { responsive: true, displaylogo: false, displayModeBar: narrow ? false : "hover" });
      target.dataset.drawn = "true";
    });
  }
  document.addEventListener("DOMContentLoaded", function () { draw(document); });
  document.addEventListener("htmx:afterSettle", function () { draw(document); });
})();
