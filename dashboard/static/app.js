// raftq dashboard: draws depth sparklines from data-points and, when the
// box is ticked, reloads the page every 5 s. Nothing else runs here: the
// pages are rendered by the node.
"use strict";

function drawSpark(svg) {
  const pts = (svg.dataset.points || "").split(",").filter(s => s !== "").map(Number);
  const w = Number(svg.getAttribute("width")), h = Number(svg.getAttribute("height"));
  const ns = "http://www.w3.org/2000/svg";
  if (pts.length < 2) {
    const t = document.createElementNS(ns, "text");
    t.setAttribute("x", 2); t.setAttribute("y", h - 6); t.setAttribute("class", "spark-empty");
    t.textContent = "sampling…";
    svg.appendChild(t);
    return;
  }
  const lo = Math.min(...pts), hi = Math.max(...pts), span = hi - lo || 1;
  const xy = pts.map((v, i) => {
    const x = (i / (pts.length - 1)) * (w - 2) + 1;
    const y = h - 1 - ((v - lo) / span) * (h - 2);
    return x.toFixed(1) + "," + y.toFixed(1);
  });
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", xy.join(" "));
  svg.appendChild(line);
  svg.dataset.drawn = "true";
}

function autoRefresh() {
  const box = document.getElementById("autorefresh");
  if (!box) return;
  box.checked = localStorage.getItem("raftq-autorefresh") === "1";
  let timer = null;
  const arm = () => {
    clearTimeout(timer);
    if (box.checked) timer = setTimeout(() => location.reload(), 5000);
  };
  box.addEventListener("change", () => {
    localStorage.setItem("raftq-autorefresh", box.checked ? "1" : "0");
    arm();
  });
  arm();
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("svg.spark").forEach(drawSpark);
  autoRefresh();
});
