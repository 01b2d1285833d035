// Draw every figure whose JSON sits in <script type="application/json" id="figure-NAME"> into #chart-NAME,
// on load and after each htmx swap (filters swap the dashboard in place).
(function () {
  // A title longer than the chart is wide wraps onto lines that fit (about 7.5 px a character at 13 px).
  function fitTitle(layout, width) {
    var title = layout && layout.title;
    if (!title || !title.text) return;
    var most = Math.max(12, Math.floor(width / 7.5)), lines = [], line = "";
    String(title.text).split(" ").forEach(function (word) {
      if (line && (line + " " + word).length > most) { lines.push(line); line = word; }
      else line = line ? line + " " + word : word;
    });
    if (line) lines.push(line);
    title.text = lines.join("<br>");
    title.font = Object.assign({}, title.font, { size: 13 });
    layout.margin = Object.assign({}, layout.margin, { t: Math.max((layout.margin || {}).t || 0, 24 + 18 * lines.length) });
  }

  function draw(root) {
    if (!window.Plotly) return;
    root.querySelectorAll("script[id^=\"figure-\"]").forEach(function (source) {
      var target = document.getElementById("chart-" + source.id.slice("figure-".length));
      if (!target || target.dataset.drawn) return;
      var figure = JSON.parse(source.textContent);
      // On a phone the toolbar would sit over the title: leave it out there (zoom by pinching still works).
      var narrow = window.matchMedia("(max-width: 640px)").matches;
      if (narrow) fitTitle(figure.layout, target.clientWidth || window.innerWidth);
      window.Plotly.react(target, figure.data, figure.layout,
        { responsive: true, displaylogo: false, displayModeBar: narrow ? false : "hover" });
      target.dataset.drawn = "true";
    });
  }
  document.addEventListener("DOMContentLoaded", function () { draw(document); });
  document.addEventListener("htmx:afterSettle", function () { draw(document); });
})();
