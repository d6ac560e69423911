// The graph view's script (pgrag_dag/graph/view.py writes PAGE and CAP before it): plain SVG, no library.
// Two levels — the overview of communities and one community's members — drawn at the coordinates computed
// when the page was written, so every load shows the same picture. Labels are placed on every redraw, by
// rank (a community's size, an entity's degree), where they do not collide with one already placed: the
// biggest at the overall zoom, more as one zooms in.
"use strict";
const SVGNS = "http://www.w3.org/2000/svg";
const NODES = new Map(PAGE.nodes.map((n) => [n.id, n]));
const EDGES = PAGE.edges;
const GROUPS = new Map(PAGE.communities.map((c) => [String(c.id), c]));
const LIST_MAX = 60;  // relations listed per entity found
const FONT = "system-ui, -apple-system, 'Segoe UI', sans-serif";
const LINE = 28;  // characters per line of a community's label (two lines at most)
const TOP = 12;   // labels of the first this many by rank (if bigger than the median) may cover other circles

const svg = document.getElementById("graph");
const layers = {};
for (const name of ["links", "circles", "edgeLabels", "labels"]) {
  layers[name] = svg.appendChild(document.createElementNS(SVGNS, "g"));
  layers[name].setAttribute("class", name);
}
const input = document.getElementById("search");
const status = document.getElementById("status");
const results = document.getElementById("results");
const crumb = document.getElementById("crumb");
const about = document.getElementById("about");
const norm = (s) => (s || "").normalize("NFKC").toLowerCase().trim();
const measure = document.createElement("canvas").getContext("2d");

let view = null;       // {key, items, lines}
let tf = {k: 1, x: 0, y: 0};  // screen = world · k + (x, y)
let selected = null;   // the selected entity's id
let hovered = null;    // the item under the pointer
let pending = false;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function svgEl(tag, attrs, parent) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function wrap(text) {
  // a community's title in at most two lines of about LINE characters, the rest cut with an ellipsis
  const words = (text || "").split(/\s+/).filter(Boolean);
  const lines = [""];
  for (const w of words) {
    const cur = lines[lines.length - 1];
    if (!cur || (cur + " " + w).length <= LINE) lines[lines.length - 1] = cur ? cur + " " + w : w;
    else if (lines.length < 2) lines.push(w);
    else { lines[1] = lines[1] + " …"; break; }
  }
  return lines.map((l) => (l.length > LINE + 2 ? l.slice(0, LINE) + "…" : l));
}

function makeLabel(item, lines, size, weight) {
  measure.font = `${weight} ${size}px ${FONT}`;
  const text = svgEl("text", {class: "label", "font-size": size, "font-weight": weight, visibility: "hidden"},
                     layers.labels);
  text.dataset.for = item.key;
  for (const line of lines) svgEl("tspan", {x: 0, dy: size * 1.15}, text).textContent = line;
  item.label = {el: text, lines: lines.length, size,
                width: Math.max(...lines.map((l) => measure.measureText(l).width)), shown: false};
}

function clear() {
  for (const g of Object.values(layers)) g.replaceChildren();
}

function buildOverview() {
  clear();
  const items = new Map();
  for (const c of PAGE.communities) {
    if (c.id === LOOSE) continue;
    const item = {key: String(c.id), kind: "community", x: c.x, y: c.y, r: c.r, rank: c.live, data: c};
    const g = svgEl("g", {class: "community-node"}, layers.circles);
    Object.assign(g.dataset, {communityId: c.id, x: c.x, y: c.y, members: c.live, size: c.size});
    item.circle = svgEl("circle", {fill: c.color, stroke: "#fff", "stroke-width": 1.5}, g);
    svgEl("title", {}, g).textContent =
      `${c.title}\n${c.live} members, rating ${c.rating}\n${c.summary || ""}\n(click to open)`;
    g.addEventListener("click", () => { location.hash = "c=" + c.id; });
    hover(g, item);
    item.g = g;
    makeLabel(item, wrap(c.title), 13, 600);
    items.set(item.key, item);
  }
  const lines = [];
  for (const l of PAGE.links) {
    const a = items.get(String(l.source)), b = items.get(String(l.target));
    const path = svgEl("path", {class: "link", stroke: "#8a96a3", fill: "none",
                                "stroke-width": (1 + Math.log2(l.relations)).toFixed(2), "stroke-opacity": 0.45},
                       layers.links);
    svgEl("title", {}, path).textContent = `${l.relations} relation(s) between “${a.data.title}” and “${b.data.title}”`;
    lines.push({a, b, path, bend: 0, arrow: false});
  }
  return {key: "overview", items, lines};
}

function buildGroup(group) {
  clear();
  const items = new Map();
  for (const id of group.members) {
    const n = NODES.get(id);
    const item = {key: String(id), kind: "entity", x: n.x, y: n.y, r: n.r, rank: n.degree, data: n};
    const g = svgEl("g", {class: "entity-node"}, layers.circles);
    Object.assign(g.dataset, {entityId: id, x: n.x, y: n.y, degree: n.degree});
    item.circle = svgEl("circle", {fill: group.color, stroke: "#fff", "stroke-width": 1.2}, g);
    svgEl("title", {}, g).textContent = n.title;
    g.addEventListener("click", () => { input.value = n.label; search(n.label); });
    hover(g, item);
    item.g = g;
    makeLabel(item, [n.label.length > 40 ? n.label.slice(0, 38) + "…" : n.label], 12, 400);
    items.set(item.key, item);
  }
  const lines = [];
  for (const e of EDGES) {
    const a = items.get(String(e.from)), b = items.get(String(e.to));
    if (!a || !b || a === b) continue;
    const kind = e.negated ? "denied" : e.superseded ? "superseded" : "current";
    const path = svgEl("path", {class: "relation " + kind, fill: "none", stroke: COLORS[kind],
                                "stroke-width": (0.8 + Math.log2(Math.max(1, e.weight)) * 0.6).toFixed(2),
                                "marker-end": `url(#arrow-${kind})`}, layers.links);
    if (e.negated) path.setAttribute("stroke-dasharray", "6 4");
    if (e.superseded) path.setAttribute("stroke-dasharray", "2 4");
    path.dataset.relationId = e.id;
    svgEl("title", {}, path).textContent = e.title;
    const text = svgEl("text", {class: "edge-label", "font-size": 11, visibility: "hidden"}, layers.edgeLabels);
    const v = validity(e);
    text.textContent = `${e.negated ? "NOT " : ""}${e.predicate}${v ? " (" + v.replace("valid ", "") + ")" : ""}`;
    measure.font = `400 11px ${FONT}`;
    lines.push({a, b, path, bend: e.bend, arrow: true, edge: e, text, width: measure.measureText(text.textContent).width});
  }
  return {key: String(group.id), items, lines};
}

function hover(g, item) {
  g.addEventListener("mouseenter", () => { hovered = item; schedule(); });
  g.addEventListener("mouseleave", () => { if (hovered === item) hovered = null; schedule(); });
}

function open(key) {
  const group = key === "overview" ? null : GROUPS.get(key);
  if (key !== "overview" && !group) return false;
  if (view && view.key === key) return true;
  selected = null;
  hovered = null;
  view = group ? buildGroup(group) : buildOverview();
  const radii = [...view.items.values()].map((i) => i.r).sort((a, b) => a - b);
  view.medianR = radii.length ? radii[Math.floor(radii.length / 2)] : 0;
  svg.dataset.view = view.key;
  crumb.replaceChildren();
  const home = el("button", "home", "Overview");
  home.type = "button";
  home.addEventListener("click", () => { location.hash = ""; open("overview"); });
  crumb.append(home);
  if (group) {
    crumb.append(" › ", el("b", "", group.title));
    about.textContent = `${group.members.length === group.live ? `all ${group.live}` : `the ${group.members.length} best-connected of ${group.live}`} `
      + `live members drawn, sized by degree; click one to list its relations. ${group.summary || ""}`;
  } else {
    about.textContent = `${CAP.communities} communit${CAP.communities === 1 ? "y" : "ies"} as circles sized by their live members, `
      + "joined by the relations between them; click one to open it.";
  }
  fit();
  return true;
}

function bounds(items) {
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (const i of items) {
    x0 = Math.min(x0, i.x - i.r); y0 = Math.min(y0, i.y - i.r);
    x1 = Math.max(x1, i.x + i.r); y1 = Math.max(y1, i.y + i.r);
  }
  return {x0, y0, x1, y1};
}

function frame(items, maxK) {
  const b = bounds(items);
  if (!isFinite(b.x0)) { tf = {k: 1, x: 0, y: 0}; render(); return; }
  // margins wide enough for the labels of the circles at the edges (they sit beside or below them)
  const W = svg.clientWidth || 800, H = svg.clientHeight || 600, mx = 110, my = 44;
  const k = Math.min((W - 2 * mx) / Math.max(b.x1 - b.x0, 1), (H - 2 * my) / Math.max(b.y1 - b.y0, 1), maxK);
  tf = {k, x: W / 2 - k * (b.x0 + b.x1) / 2, y: H / 2 - k * (b.y0 + b.y1) / 2};
  render();
}

function fit() { frame([...view.items.values()], 3); view.fitK = tf.k; }

function zoom(factor, cx, cy) {
  const W = svg.clientWidth, H = svg.clientHeight;
  if (cx === undefined) { cx = W / 2; cy = H / 2; }
  const k = Math.min(Math.max(tf.k * factor, 0.02), 40);
  tf = {k, x: cx - (cx - tf.x) * k / tf.k, y: cy - (cy - tf.y) * k / tf.k};
  schedule();
}

function schedule() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => { pending = false; render(); });
}

const sx = (i) => i.x * tf.k + tf.x;
const sy = (i) => i.y * tf.k + tf.y;
// zoomed in past the fitted view, circles grow as the square root of the zoom while the distances between
// them grow with it: the room that opens between them is where more labels go
const sr = (i) => {
  const base = view.fitK || tf.k;
  return Math.max(tf.k <= base ? i.r * tf.k : i.r * base * Math.sqrt(tf.k / base), 2);
};

function neighbours() {
  const near = new Set();
  if (selected === null) return near;
  near.add(String(selected));
  for (const l of view.lines) {
    if (l.edge && (l.edge.from === selected || l.edge.to === selected)) { near.add(l.a.key); near.add(l.b.key); }
  }
  return near;
}

function render() {
  if (!view) return;
  const near = neighbours();
  const dim = near.size > 0;
  for (const i of view.items.values()) {
    i.circle.setAttribute("cx", sx(i).toFixed(1));
    i.circle.setAttribute("cy", sy(i).toFixed(1));
    i.circle.setAttribute("r", sr(i).toFixed(1));
    i.g.classList.toggle("dim", dim && !near.has(i.key));
    i.g.classList.toggle("selected", String(selected) === i.key);
  }
  for (const l of view.lines) {
    const ax = sx(l.a), ay = sy(l.a), bx = sx(l.b), by = sy(l.b);
    const dx = bx - ax, dy = by - ay, len = Math.hypot(dx, dy) || 1;
    const off = l.bend * Math.min(len * 0.18, 36);
    const mx = (ax + bx) / 2 - dy / len * off, my = (ay + by) / 2 + dx / len * off;
    // leave the ends at the circles' rims (towards the curve's control point), so an arrow's tip shows
    const ua = Math.hypot(mx - ax, my - ay) || 1, ub = Math.hypot(bx - mx, by - my) || 1;
    const ra = sr(l.a), rb = sr(l.b) + (l.arrow ? 1.5 : 0);
    const x0 = ax + (mx - ax) / ua * ra, y0 = ay + (my - ay) / ua * ra;
    const x1 = bx - (bx - mx) / ub * rb, y1 = by - (by - my) / ub * rb;
    l.path.setAttribute("d", `M${x0.toFixed(1)},${y0.toFixed(1)} Q${mx.toFixed(1)},${my.toFixed(1)} ${x1.toFixed(1)},${y1.toFixed(1)}`);
    const mine = l.edge && (l.edge.from === selected || l.edge.to === selected);
    l.path.classList.toggle("dim", dim && !mine);
    l.mid = {x: (x0 + 2 * mx + x1) / 4, y: (y0 + 2 * my + y1) / 4, mine};
  }
  placeLabels(near);
}

function placeLabels(near) {
  const W = svg.clientWidth, H = svg.clientHeight;
  const boxes = [];
  const items = [...view.items.values()];
  // a label may cover neither another label nor another circle (its own circle is where it points)
  const hitsCircle = (b, self) => items.some((i) => {
    if (i === self) return false;
    const cx = sx(i), cy = sy(i), r = sr(i);
    const nx = Math.max(b.x0, Math.min(cx, b.x1)), ny = Math.max(b.y0, Math.min(cy, b.y1));
    return (nx - cx) ** 2 + (ny - cy) ** 2 < r * r;
  });
  const clear = (b) => b.x0 > 0 && b.x1 < W && b.y0 > 0 && b.y1 < H
    && !boxes.some((o) => b.x0 < o.x1 && o.x0 < b.x1 && b.y0 < o.y1 && o.y0 < b.y1);
  const free = (b, self) => clear(b) && !hitsCircle(b, self);
  const pinned = (i) => (hovered === i ? 3 : String(selected) === i.key ? 2 : near.has(i.key) ? 1 : 0);
  const order = items.sort((p, q) => pinned(q) - pinned(p) || q.rank - p.rank || p.key.localeCompare(q.key));
  let shown = 0, placed = 0;
  const place = (i) => {
    placed++;
    const lab = i.label, x = sx(i), y = sy(i), r = sr(i), w = lab.width + 4, h = lab.lines * lab.size * 1.15 + 4;
    const d = r * 0.71;  // the diagonal spots touch the circle at 45°
    // inside a circle wide enough to hold it (a hub is ringed by its neighbours), else below, above, right,
    // left of the circle, then the diagonals: the first free spot
    const inside = w <= 1.8 * r && h <= r ? [[x - w / 2, y - h / 2]] : [];
    const spots = [...inside, [x - w / 2, y + r + 1], [x - w / 2, y - r - h - 1], [x + r + 3, y - h / 2], [x - r - w - 3, y - h / 2],
                   [x + d, y + d], [x - d - w, y + d], [x + d, y - d - h], [x - d - w, y - d - h]];
    const onScreen = x + r > 0 && x - r < W && y + r > 0 && y - r < H;
    let at = null;
    if (onScreen) {
      for (const [x0, y0] of spots) {
        if (free({x0, y0, x1: x0 + w, y1: y0 + h}, i)) { at = [x0, y0]; break; }
      }
      // the first few by rank, if bigger than the median, may cover circles (not labels): the biggest are
      // labelled even where crowded
      if (!at && placed <= TOP && i.r >= view.medianR) at = spots.find(([x0, y0]) => clear({x0, y0, x1: x0 + w, y1: y0 + h})) || null;
      if (!at && pinned(i) >= 2) at = spots[0];
    }
    if (at) {
      boxes.push({x0: at[0], y0: at[1], x1: at[0] + w, y1: at[1] + h});
      lab.el.setAttribute("transform", `translate(${(at[0] + 2).toFixed(1)},${at[1].toFixed(1)})`);
      shown++;
    }
    lab.el.setAttribute("visibility", at ? "visible" : "hidden");
    lab.el.classList.toggle("shown", Boolean(at));
    lab.el.classList.toggle("dim", near.size > 0 && !near.has(i.key));
  };
  // the hovered and selected entities first, then the selected one's relations, then by rank
  let k = 0;
  for (; k < order.length && pinned(order[k]) >= 2; k++) place(order[k]);
  for (const l of view.lines) {
    if (!l.text) continue;
    let show = false;
    if (l.mid.mine) {
      const box = {x0: l.mid.x - l.width / 2 - 1, x1: l.mid.x + l.width / 2 + 1, y0: l.mid.y - 7, y1: l.mid.y + 6};
      show = free(box, null);
      if (show) {
        boxes.push(box);
        l.text.setAttribute("x", (l.mid.x - l.width / 2).toFixed(1));
        l.text.setAttribute("y", (l.mid.y + 4).toFixed(1));
      }
    }
    l.text.setAttribute("visibility", show ? "visible" : "hidden");
  }
  for (; k < order.length; k++) place(order[k]);
  svg.dataset.labelsShown = shown;
}

function validity(e) {
  return e.valid_from || e.valid_to ? `valid ${e.valid_from || ""}–${e.valid_to || ""}` : "";
}

function relationItem(e, node) {
  const li = el("li", "relation");
  li.dataset.relationId = e.id;
  li.dataset.predicate = e.predicate;
  li.dataset.negated = e.negated;
  li.dataset.superseded = e.superseded;
  const outgoing = e.from === node.id;
  const other = NODES.get(outgoing ? e.to : e.from);
  li.dataset.neighbour = other.label;
  const arrow = `${e.negated ? "NOT " : ""}${e.predicate}`;
  const name = el("a", "neighbour", other.label);
  name.href = "#q=" + encodeURIComponent(other.label);
  if (outgoing) li.append(`${node.label} —${arrow}→ `, name);
  else li.append(name, ` —${arrow}→ ${node.label}`);
  if (e.negated) li.append(el("span", "badge denied", "denied"));
  if (e.superseded) li.append(el("span", "badge superseded", `superseded by ${e.superseded_by}`));
  const v = validity(e);
  if (v) li.append(el("span", "validity", v));
  if (other.community !== node.community) {
    const there = GROUPS.get(String(other.community));
    if (there) li.append(el("span", "elsewhere", there.id === LOOSE ? "in no community" : `in ${there.title}`));
  }
  return li;
}

function entityCard(node) {
  const card = el("section", "match");
  card.dataset.entityId = node.id;
  card.append(el("h3", "entity-name", node.label));
  const edges = EDGES.filter((e) => e.from === node.id || e.to === node.id);
  const meta = [node.entity_type, node.community_title ? `community: ${node.community_title}` : "no community",
                edges.length === node.degree ? `${node.degree} relation(s)`
                                             : `${edges.length} of its ${node.degree} relations in the page`];
  if (node.aliases && node.aliases.length) meta.push(`also: ${node.aliases.join(", ")}`);
  card.append(el("p", "meta", meta.join(" · ")));
  if (node.description) card.append(el("p", "description", node.description));
  const list = el("ul", "relations");
  edges.sort((a, b) => (a.superseded - b.superseded) || a.predicate.localeCompare(b.predicate) || a.id - b.id);
  for (const e of edges.slice(0, LIST_MAX)) list.append(relationItem(e, node));
  if (edges.length > LIST_MAX) list.append(el("li", "more", `… and ${edges.length - LIST_MAX} more in the page`));
  card.append(list);
  return card;
}

function search(q) {
  results.replaceChildren();
  const nq = norm(q);
  if (!nq) { status.textContent = ""; selected = null; render(); return; }
  const all = [...NODES.values()];
  let hits = all.filter((n) => norm(n.label) === nq || (n.aliases || []).some((a) => norm(a) === nq));
  if (!hits.length) hits = all.filter((n) => norm(n.label).includes(nq) || (n.aliases || []).some((a) => norm(a).includes(nq)));
  hits.sort((a, b) => b.degree - a.degree || a.label.localeCompare(b.label));
  status.textContent = hits.length ? `${hits.length} entit${hits.length === 1 ? "y" : "ies"} match “${q}”`
                                   : `no entity in the page matches “${q}” (of ${all.length} in the page)`;
  for (const n of hits.slice(0, 10)) results.append(entityCard(n));
  if (!hits.length) return;
  const first = hits[0];
  open(String(first.community));
  selected = first.id;
  const near = neighbours();
  frame([...view.items.values()].filter((i) => near.has(i.key)), 2.5);
}

function fromHash() {
  const c = /(?:^#|&)c=([^&]*)/.exec(location.hash);
  const m = /(?:^#|&)q=([^&]*)/.exec(location.hash);
  if (m) {
    const q = decodeURIComponent(m[1].replace(/\+/g, " "));
    input.value = q;
    search(q);
    return;
  }
  if (!(c && open(decodeURIComponent(c[1])))) open("overview");
  // #…&z=<factor>: that many times the fitted zoom, about the centre (an address to share a closer look)
  const z = /(?:^#|&)z=([0-9.]+)/.exec(location.hash);
  if (z && parseFloat(z[1]) > 0) { fit(); zoom(parseFloat(z[1])); render(); }
}

// pan by dragging, zoom with the wheel (around the pointer) or the buttons
let drag = null, dragged = false;
svg.addEventListener("pointerdown", (ev) => { drag = {x: ev.clientX, y: ev.clientY, tx: tf.x, ty: tf.y, moved: false}; });
window.addEventListener("pointermove", (ev) => {
  if (!drag) return;
  const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
  if (!drag.moved && Math.hypot(dx, dy) < 4) return;
  if (!drag.moved) svg.setPointerCapture(ev.pointerId);
  drag.moved = true;
  tf = {k: tf.k, x: drag.tx + dx, y: drag.ty + dy};
  schedule();
});
window.addEventListener("pointerup", () => { dragged = Boolean(drag && drag.moved); drag = null; });
// a drag ends in a click on what is under the pointer: it opens nothing
svg.addEventListener("click", (ev) => { if (dragged) ev.stopPropagation(); dragged = false; }, true);
svg.addEventListener("wheel", (ev) => {
  ev.preventDefault();
  const r = svg.getBoundingClientRect();
  zoom(Math.exp(-ev.deltaY * 0.0015), ev.clientX - r.left, ev.clientY - r.top);
}, {passive: false});
document.getElementById("zoom-in").addEventListener("click", () => zoom(1.5));
document.getElementById("zoom-out").addEventListener("click", () => zoom(1 / 1.5));
document.getElementById("zoom-fit").addEventListener("click", fit);
window.addEventListener("resize", schedule);

input.addEventListener("input", () => search(input.value));
input.addEventListener("keydown", (ev) => { if (ev.key === "Enter") location.hash = "q=" + encodeURIComponent(input.value); });
for (const li of document.querySelectorAll("#communities .community")) {
  li.addEventListener("click", () => { location.hash = "c=" + li.dataset.communityId; });
}
window.addEventListener("hashchange", fromHash);
fromHash();
