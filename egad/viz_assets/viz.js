/* egad extraction visualiser: draws the data egad/viz_data.py wrote into #egad-data.
 *
 * The e-graph is held here in full; cytoscape.js only ever holds what is drawn.
 * A region (loop, branch) is a frame: closed, it is one box standing for everything
 * inside it (edges to and from its contents end on the box); open, it is a compound
 * node around its e-classes and its own (closed) sub-regions. An e-class with two or
 * more e-nodes is a dotted compound around its alternatives. Every open/close
 * rebuilds the drawn elements and lays them out again with dagre, level by level
 * (`layout`). Data flows top to bottom: an edge goes from an input's e-class (its
 * extracted e-node, or its first) to the e-node that reads it.
 *
 * window.egadViz exposes the cytoscape instance and the actions, for tests.
 */
(function () {
  "use strict";

  const DATA = JSON.parse(document.getElementById("egad-data").textContent);
  const ROOT = "r0";
  const nodeById = new Map(DATA.nodes.map((n) => [n.id, n]));
  const classById = new Map(DATA.classes.map((c) => [c.id, c]));
  const frameById = new Map(DATA.frames.map((f) => [f.id, Object.assign(f, { childFrames: [], ownClasses: [] })]));
  DATA.frames.forEach((f) => { if (f.parent) frameById.get(f.parent).childFrames.push(f.id); });
  DATA.classes.forEach((c) => frameById.get(c.frame).ownClasses.push(c.id));
  const chainOf = new Map();  // e-node id -> index of the critical chain it is on
  DATA.critical.forEach((chain, k) => chain.nodes.forEach((id) => chainOf.set(id, k)));

  const expanded = new Set([ROOT]);
  let extractedOnly = false;
  let matches = new Set();
  let matchFrames = new Set();

  const pathCache = new Map();
  function framePath(frameId) {  // ROOT ... frameId
    if (!pathCache.has(frameId)) {
      const path = [];
      for (let f = frameId; f; f = frameById.get(f).parent) path.push(f);
      pathCache.set(frameId, path.reverse());
    }
    return pathCache.get(frameId);
  }
  // The outermost closed frame around frameId's contents (frameId itself included), or null if all are open.
  function closedHolder(frameId) {
    for (const f of framePath(frameId)) if (!expanded.has(f)) return f;
    return null;
  }
  function frameShown(frame) { return !extractedOnly || frame.extracted > 0; }
  function nodeShown(n) { return !extractedOnly || n.extracted; }

  // --- what is drawn -----------------------------------------------------------------

  function usText(us) {
    if (us === null || us === undefined) return "";
    if (us === 0) return "0";
    return us >= 100 ? us.toFixed(0) : us >= 1 ? us.toFixed(2) : us.toPrecision(2);
  }
  function costText(n) {
    if (n.cost_us === null) return n.head === "For" || n.head === "While" ? "priced by its body" : "";
    return usText(n.cost_us) + " \u00b5s" + (n.runs > 1 ? " \u00d7" + Math.round(n.runs) : "");
  }
  function frameTitle(f) {
    return f.label + (f.loc ? " @ " + f.loc : "") + (f.trips ? " \u00b7 ~" + f.trips + " trips" : "");
  }
  function frameCounts(f) {
    return f.enodes + " e-nodes, " + f.extracted + " extracted" + (f.critical ? ", " + f.critical + " critical" : "");
  }
  function box(lines, fontSize) {
    const longest = Math.max(...lines.map((l) => l.length));
    return { w: Math.max(40, longest * fontSize * 0.62 + 16), h: lines.length * fontSize * 1.3 + 12 };
  }

  function elements() {
    const els = [];
    for (const f of DATA.frames) {
      if (f.id === ROOT || closedHolder(f.parent) !== null || !frameShown(f)) continue;
      const open = expanded.has(f.id);
      const lines = open ? [frameTitle(f)] : [frameTitle(f), frameCounts(f), "click to open"];
      const size = box(lines, 11);
      const classes = ["frame", open ? "open" : "closed"];
      if (f.critical) classes.push("has-critical");
      if (f.extracted) classes.push("has-extracted");
      if (matchFrames.has(f.id)) classes.push("has-match");
      els.push({ group: "nodes", data: { id: f.id, kind: "frame", label: lines.join("\n"), w: size.w, h: size.h,
        parent: f.parent === ROOT ? undefined : f.parent }, classes: classes.join(" ") });
    }
    for (const c of DATA.classes) {
      if (c.leaf || closedHolder(c.frame) !== null) continue;  // leaves: drawn beside each reader, below
      const members = c.nodes.map((id) => nodeById.get(id)).filter(nodeShown);
      if (!members.length) continue;
      const frameParent = c.frame === ROOT ? undefined : c.frame;
      let parent = frameParent;
      if (members.length > 1) {
        els.push({ group: "nodes", data: { id: c.id, kind: "class", label: "", parent: frameParent },
          classes: "eclass" + (c.chosen ? " in-term" : "") });
        parent = c.id;
      }
      for (const n of members) {
        const lines = [n.op, costText(n)].filter((l) => l);
        const size = box(lines, 10);
        const classes = ["enode", n.extracted ? "extracted" : "alternative"];
        if (n.critical) classes.push("critical");
        if (matches.has(n.id)) classes.push("match");
        els.push({ group: "nodes", data: { id: n.id, kind: "enode", label: lines.join("\n"), w: size.w, h: size.h, parent },
          classes: classes.join(" ") });
      }
    }
    const seen = new Set();
    for (const n of DATA.nodes) {
      const target = nodeEnd(n);
      if (target === null) continue;
      for (const classId of n.inputs) {
        const input = classById.get(classId);
        let source = classEnd(input);
        if (source === null || source === target) continue;
        if (input.leaf && !nodeById.has(target)) continue;  // a closed region's counts stand for its constants
        if (input.leaf && closedHolder(input.frame) === null) {
          // A constant or parameter read in many places would pull long edges across the
          // whole drawing (slow to lay out, hard to read): each reader gets its own copy.
          const copy = "cp-" + classId + "-" + target;
          if (!seen.has(copy)) {
            seen.add(copy);
            const of = nodeById.get(source);
            const classes = ["enode", "copy", of.extracted ? "extracted" : "alternative"];
            if (matches.has(of.id)) classes.push("match");
            const size = box([of.op], 9);
            els.push({ group: "nodes", data: { id: copy, kind: "enode", of: of.id, label: of.op, w: size.w, h: size.h,
              parent: copyParent(target) }, classes: classes.join(" ") });
          }
          source = copy;
        }
        const key = source + ">" + target;
        if (seen.has(key)) continue;
        seen.add(key);
        const classes = [];
        if (n.extracted && input.chosen && source === input.chosen) classes.push("extracted");
        if (n.critical && input.chosen && chainOf.has(input.chosen) && chainOf.get(input.chosen) === chainOf.get(n.id)) {
          classes.push("critical");
        }
        els.push({ group: "edges", data: { id: "e" + seen.size, source, target }, classes: classes.join(" ") });
      }
    }
    return els;
  }
  function nodeEnd(n) {  // what an e-node's incoming edges end on: itself, the closed frame around it, or nothing
    const holder = closedHolder(classById.get(n.class).frame);
    if (holder === null) return nodeShown(n) ? n.id : null;
    return frameShown(frameById.get(holder)) ? holder : null;
  }
  function copyParent(target) {  // the frame a copy of a leaf sits in: its reader's
    const frame = nodeById.has(target) ? classById.get(nodeById.get(target).class).frame : frameById.get(target).parent;
    return frame === ROOT ? undefined : frame;
  }
  function classEnd(c) {
    const holder = closedHolder(c.frame);
    if (holder !== null) return frameShown(frameById.get(holder)) ? holder : null;
    if (c.chosen) return c.chosen;
    return extractedOnly ? null : c.nodes[0];
  }

  // --- cytoscape ---------------------------------------------------------------------

  const STYLE = [
    { selector: "node", style: { "label": "data(label)", "text-wrap": "wrap", "text-valign": "center", "text-halign": "center",
      "font-size": 10, "shape": "round-rectangle", "color": "#1d2430",
      "background-color": "#eef1f5", "border-width": 1, "border-color": "#8a94a6", "min-zoomed-font-size": 6 } },
    { selector: "node[w]", style: { "width": "data(w)", "height": "data(h)" } },
    { selector: "node.extracted", style: { "background-color": "#f5b041", "border-color": "#b9770e", "border-width": 2 } },
    { selector: "node.critical", style: { "border-color": "#d62728", "border-width": 4 } },
    { selector: ":parent", style: { "text-valign": "top", "text-halign": "center", "background-opacity": 0.4 } },
    { selector: "node.frame", style: { "background-color": "#dbe4f3", "border-color": "#5b7bb4", "border-width": 2,
      "border-style": "dashed", "font-size": 11, "font-weight": "bold", "padding": 14 } },
    { selector: "node.frame.closed", style: { "background-opacity": 1, "shape": "round-rectangle" } },
    { selector: "node.frame.has-critical", style: { "border-color": "#d62728" } },
    { selector: "node.copy", style: { "font-size": 9, "border-style": "dashed", "background-opacity": 0.7 } },
    { selector: "node.eclass", style: { "background-opacity": 0, "border-style": "dotted", "border-width": 1.5,
      "border-color": "#7a8499", "padding": 5 } },
    { selector: "node.eclass.in-term", style: { "border-color": "#b9770e" } },
    { selector: "node.match, node.frame.closed.has-match", style: { "underlay-color": "#1e90ff", "underlay-opacity": 0.45, "underlay-padding": 6 } },
    { selector: "node:selected", style: { "overlay-color": "#1f77b4", "overlay-opacity": 0.25, "overlay-padding": 4 } },
    { selector: "edge", style: { "width": 1, "line-color": "#b4bcc8", "target-arrow-color": "#b4bcc8",
      "target-arrow-shape": "triangle", "arrow-scale": 0.8, "curve-style": "bezier" } },
    { selector: "edge.extracted", style: { "line-color": "#b9770e", "target-arrow-color": "#b9770e", "width": 1.8 } },
    { selector: "edge.critical", style: { "line-color": "#d62728", "target-arrow-color": "#d62728", "width": 3.5, "z-index": 9 } },
  ];

  const cy = cytoscape({
    container: document.getElementById("graph"), style: STYLE, minZoom: 0.02, maxZoom: 4,
    textureOnViewport: DATA.nodes.length > 3000, hideEdgesOnViewport: DATA.nodes.length > 3000,
  });
  const status = document.getElementById("status");

  // Rebuild what is drawn and lay it out; `focus`, if given, is a function returning the
  // elements to show (called once the new elements are in).
  function draw(focus) {
    const els = elements();
    const count = els.filter((e) => e.group === "nodes" && e.data.kind === "enode" && !e.data.of).length;
    status.textContent = "laying out " + count + " e-nodes\u2026";
    document.body.dataset.ready = "0";
    setTimeout(() => {  // let the status paint before a long layout
      const started = performance.now();
      cy.batch(() => { cy.elements().remove(); cy.add(els); });
      layout();
      view(focus ? focus() : null);
      const seconds = ((performance.now() - started) / 1000).toFixed(2);
      status.textContent = count + " of " + DATA.nodes.length + " e-nodes drawn (" + seconds + " s)";
      syncOutline();
      document.body.dataset.ready = "1";
    }, 20);
  }
  // --- layout ------------------------------------------------------------------------
  // dagre lays out one level at a time: what sits directly in the program or in one open
  // region (e-nodes, e-classes, regions), where an open region is a box the size of its
  // own layout and an e-class a box holding its alternatives side by side. A region is
  // so drawn as one block (laid out as a compound graph, dagre spreads a loop body
  // across the whole drawing, and takes twice as long).
  const FRAME_PAD = 16, FRAME_LABEL = 20, CLASS_PAD = 7, GAP = 8;
  function layout() {
    const parent = new Map();
    const children = new Map([["", []]]);
    cy.nodes().forEach((n) => {
      const container = n.data("parent") || "";
      parent.set(n.id(), container);
      if (!children.has(container)) children.set(container, []);
      children.get(container).push(n.id());
    });
    const path = (id) => {  // top-level item ... id
      const chain = [id];
      while (parent.get(chain[0])) chain.unshift(parent.get(chain[0]));
      return chain;
    };
    const levelEdges = new Map();  // container -> [item, item] of each edge between its items
    cy.edges().forEach((edge) => {
      const a = path(edge.source().id()), b = path(edge.target().id());
      let k = 0;
      while (k < a.length && k < b.length && a[k] === b[k]) k++;
      if (k === a.length || k === b.length) return;
      const container = k === 0 ? "" : a[k - 1];
      if (!levelEdges.has(container)) levelEdges.set(container, []);
      levelEdges.get(container).push([a[k], b[k]]);
    });
    const size = new Map(), local = new Map();
    function measure(container) {  // lays out a container's items around (0, 0); returns its extent
      const items = children.get(container) || [];
      items.forEach((id) => {
        const node = cy.$id(id);
        if (!children.has(id)) size.set(id, { w: node.data("w") || 40, h: node.data("h") || 24 });
        else if (node.hasClass("eclass")) {
          const inner = row(id);
          size.set(id, { w: inner.w + 2 * CLASS_PAD, h: inner.h + 2 * CLASS_PAD });
        } else {
          const inner = measure(id);
          size.set(id, { w: inner.w + 2 * FRAME_PAD, h: inner.h + 2 * FRAME_PAD + FRAME_LABEL });
        }
      });
      const g = new dagre.graphlib.Graph({ multigraph: true });
      g.setGraph({ rankdir: "TB", nodesep: 14, ranksep: 30, edgesep: 6 });
      g.setDefaultEdgeLabel(() => ({}));
      items.forEach((id) => g.setNode(id, { width: size.get(id).w, height: size.get(id).h }));
      (levelEdges.get(container) || []).forEach(([a, b], k) => { if (a !== b) g.setEdge(a, b, {}, "e" + k); });
      dagre.layout(g);
      let x1 = Infinity, y1 = Infinity, x2 = -Infinity, y2 = -Infinity;
      items.forEach((id) => {
        const p = g.node(id), s = size.get(id);
        x1 = Math.min(x1, p.x - s.w / 2); x2 = Math.max(x2, p.x + s.w / 2);
        y1 = Math.min(y1, p.y - s.h / 2); y2 = Math.max(y2, p.y + s.h / 2);
      });
      items.forEach((id) => { const p = g.node(id); local.set(id, { x: p.x - (x1 + x2) / 2, y: p.y - (y1 + y2) / 2 }); });
      return items.length ? { w: x2 - x1, h: y2 - y1 } : { w: 40, h: 24 };
    }
    function row(classId) {  // an e-class's alternatives, side by side
      const items = children.get(classId);
      const widths = items.map((id) => cy.$id(id).data("w") || 40);
      const width = widths.reduce((sum, w) => sum + w, 0) + GAP * (items.length - 1);
      let x = -width / 2;
      items.forEach((id, k) => { local.set(id, { x: x + widths[k] / 2, y: 0 }); x += widths[k] + GAP; });
      return { w: width, h: Math.max(...items.map((id) => cy.$id(id).data("h") || 24)) };
    }
    const positions = {};
    function place(container, x0, y0) {
      (children.get(container) || []).forEach((id) => {
        const p = local.get(id), x = x0 + p.x, y = y0 + p.y;
        if (!children.has(id)) positions[id] = { x, y };
        else place(id, x, y + (cy.$id(id).hasClass("frame") ? FRAME_LABEL / 2 : 0));  // below the region's label
      });
    }
    measure("");
    place("", 0, 0);
    cy.nodes().filter((n) => positions[n.id()] !== undefined).positions((n) => positions[n.id()]);
  }

  // No focus: fit everything (an overview; labels appear when zoomed in). A focus (an
  // opened region, a search result): fit it, but not so far out that its labels vanish.
  function view(focus) {
    if (!focus || !focus.length) {
      cy.fit(cy.elements(), 30);
      return;
    }
    cy.fit(focus, 30);
    const readable = 0.7;  // labels of 10px draw from zoom 0.6 (min-zoomed-font-size)
    if (cy.zoom() < readable) {
      cy.zoom(readable);
      cy.center(focus);
    }
  }

  function open(frameIds) { frameIds.forEach((id) => framePath(id).forEach((f) => expanded.add(f))); }
  function toggle(frameId) {
    if (frameId === ROOT) return;
    if (expanded.has(frameId)) {
      expanded.delete(frameId);
      draw(null);
    } else {
      open([frameId]);
      draw(() => cy.$id(frameId));
    }
  }
  function drawn(id) {  // an e-node as drawn: itself, or the copies of a leaf
    const own = cy.$id(id);
    return own.length ? own : cy.nodes().filter((e) => e.data("of") === id);
  }
  function reveal(ids) {
    const list = [].concat(ids).filter((id) => nodeById.has(id));
    open(list.map((id) => classById.get(nodeById.get(id).class).frame));
    if (extractedOnly && list.some((id) => !nodeById.get(id).extracted)) {
      extractedOnly = false;
      document.getElementById("extracted-only").checked = false;
    }
    draw(() => {
      const found = cy.collection(list.map(drawn).filter((e) => e.length));
      cy.$(":selected").unselect();
      found.select();
      if (found.length === 1) details(nodeById.get(list[0]));
      return found;
    });
  }

  cy.on("tap", "node", (event) => {
    const data = event.target.data();
    if (data.kind === "enode") details(nodeById.get(data.of || data.id));
    else if (data.kind === "class") classDetails(classById.get(data.id));
    else if (data.kind === "frame") {
      if (!expanded.has(data.id)) toggle(data.id);
      else frameDetails(frameById.get(data.id));
    }
  });
  cy.on("dbltap", "node.frame.open", (event) => toggle(event.target.id()));

  // --- panels ------------------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => {
      if (k === "class") e.className = v;
      else if (k === "onclick") e.addEventListener("click", v);
      else if (k.startsWith("data-")) e.setAttribute(k, v);
      else e[k] = v;
    });
    children.flat().forEach((c) => e.append(c instanceof Node ? c : document.createTextNode(String(c))));
    return e;
  }
  function row(key, ...value) { return el("tr", {}, el("td", {}, key), el("td", {}, ...value)); }
  function nodeItem(n, extra) {
    const classes = ["enode", n.extracted ? "extracted" : "alternative"].concat(n.critical ? ["critical"] : []);
    return el("li", { class: classes.join(" "), "data-node": n.id, onclick: (e) => { e.stopPropagation(); reveal(n.id); } },
      n.op, el("span", { class: "meta" }, " \u00b7 " + [costText(n), n.rule].filter((x) => x).join(" \u00b7 ") + (extra || "")));
  }
  function setDetails(...children) {
    const section = document.getElementById("details");
    section.replaceChildren(el("h2", {}, "Selection"), ...children);
  }
  function details(n) {
    const c = classById.get(n.class);
    const frame = frameById.get(c.frame);
    setDetails(el("table", {},
      row("op", el("b", {}, n.op), " (" + n.head + ")"),
      row("cost", costText(n) || "\u2014"),
      row("rule", n.rule === "input" ? "input (the program as written)" : n.rule,
        n.site ? el("div", { class: "meta" }, n.site) : ""),
      row("source", n.source || "\u2014"),
      row("e-class", c.id + (c.type ? " : " + c.type : "") + ", " + c.nodes.length + " e-node(s)"),
      row("region", frameTitle(frame)),
      row("extracted", n.extracted ? "yes" : "no" + (c.chosen ? " (the class's extracted e-node is another)" : " (class not in the term)")),
      row("as written", n.original ? "yes: this e-node is the program's own" : "no: a rule made it"),
      row("critical path", n.critical ? "yes" : "no"),
      row("inputs", n.inputs.length ? el("ol", {}, n.inputs.map((id) => classItem(classById.get(id)))) : "none"),
    ), el("h2", {}, "Alternatives in " + c.id), el("ol", {}, c.nodes.map((id) => nodeItem(nodeById.get(id)))));
  }
  function classItem(c) {
    const chosen = nodeById.get(c.chosen || c.nodes[0]);
    return el("li", { "data-class": c.id, onclick: (e) => { e.stopPropagation(); reveal(chosen.id); } },
      chosen.op, el("span", { class: "meta" }, " \u00b7 " + c.id + (c.type ? " " + c.type : "")));
  }
  function classDetails(c) {
    setDetails(el("p", {}, "e-class " + c.id + (c.type ? " : " + c.type : "")),
      el("ol", {}, c.nodes.map((id) => nodeItem(nodeById.get(id)))));
  }
  function frameDetails(f) {
    setDetails(el("p", {}, el("b", {}, frameTitle(f))), el("p", {}, frameCounts(f)),
      el("button", { onclick: () => toggle(f.id) }, "close this region"));
  }

  function summary() {
    const s = DATA.summary;
    const header = document.getElementById("summary");
    header.append(el("h1", {}, DATA.title));
    if (s.predicted_before_us !== null && s.predicted_after_us !== null) {
      const ratio = s.predicted_after_us ? (s.predicted_before_us / s.predicted_after_us).toFixed(2) + "\u00d7" : "";
      header.append(el("span", { class: "metric", id: "predicted" }, "predicted cost: ",
        el("b", {}, usText(s.predicted_before_us) + " \u00b5s"), " before \u2192 ",
        el("b", {}, usText(s.predicted_after_us) + " \u00b5s"), " after (" + ratio + ", " + s.target + ")"));
    }
    if (s.saturation) {
      const sat = s.saturation;
      header.append(el("span", { class: "metric" }, "e-graph: " + sat.nodes + " e-nodes in " + sat.classes +
        " classes, " + sat.rounds + " rounds, stopped by " + sat.stopped_by));
    }
    header.append(el("span", { class: "metric" }, "families: " + (s.families.join(", ") || "none")));
    if (s.fallback) header.append(el("span", { class: "fallback" }, "fallback: " + s.fallback));
    document.getElementById("before").textContent = DATA.before;
    document.getElementById("after").textContent = DATA.after +
      (s.extraction_built ? "" : "\n# (the optimizer kept the program as written: " + (s.fallback || "no cheaper term") + ")");
    if (s.rules && s.rules.length) {
      const table = el("table", { id: "rules" }, el("tr", {}, el("th", {}, "rule"), el("th", {}, "matches"),
        el("th", {}, "new"), el("th", {}, "extracted")));
      s.rules.forEach((r) => table.append(el("tr", {}, el("td", {}, el("a", { href: "#", onclick: (e) => {
        e.preventDefault(); search.value = r.name; runSearch(); } }, r.name)), el("td", {}, r.matches),
        el("td", {}, r.new_nodes), el("td", {}, r.extracted))));
      document.getElementById("critical").after(el("section", {}, el("h2", {}, "Rules fired"), table));
    }
  }

  function criticalList() {
    const list = document.querySelector("#critical ol");
    if (!DATA.critical.length) list.replaceWith(el("p", { class: "hint" }, "No loop in the extracted term."));
    DATA.critical.forEach((chain) => list.append(el("li", { class: "critical-chain", onclick: () => reveal(chain.nodes) },
      el("b", {}, chain.label), ": " + usText(chain.seconds_per_trip * 1e6) + " \u00b5s per trip",
      el("div", { class: "meta" }, chain.ops.length > 14 ? chain.ops.slice(0, 12).join(" \u2192 ") + " \u2192 \u2026 (" +
        chain.ops.length + " kernels)" : chain.ops.join(" \u2192 ")))));
  }

  // The outline: every region as a <details> (closed like the graph's frames), with its e-nodes.
  const outlineDetails = new Map();
  function outline() {
    function build(f) {
      const summaryLine = el("summary", { class: f.critical ? "has-critical" : "" }, f.id === ROOT ? "program " + f.label : frameTitle(f),
        el("span", { class: "frame-meta" }, " \u2014 " + frameCounts(f)));
      const box = el("details", { "data-frame": f.id }, summaryLine);
      box.open = expanded.has(f.id);
      const list = el("ul", {});
      f.ownClasses.forEach((id) => classById.get(id).nodes.forEach((nid) => list.append(nodeItem(nodeById.get(nid)))));
      box.append(...f.childFrames.map((id) => build(frameById.get(id))), list);
      box.addEventListener("toggle", () => {
        if (f.id === ROOT || box.open === expanded.has(f.id)) return;
        toggle(f.id);
      });
      outlineDetails.set(f.id, box);
      return box;
    }
    document.getElementById("outline-tree").append(build(frameById.get(ROOT)));
  }
  function syncOutline() {
    outlineDetails.forEach((box, id) => { if (box.open !== expanded.has(id)) box.open = expanded.has(id); });
  }

  // --- search ------------------------------------------------------------------------

  const search = document.getElementById("search");
  function runSearch() {
    const query = search.value.trim().toLowerCase();
    const results = document.getElementById("results");
    matches = new Set();
    matchFrames = new Set();
    if (query.length >= 2) {
      DATA.nodes.forEach((n) => {
        if (n.op.toLowerCase().includes(query) || n.rule.toLowerCase().includes(query)) matches.add(n.id);
      });
      matches.forEach((id) => framePath(classById.get(nodeById.get(id).class).frame).forEach((f) => matchFrames.add(f)));
    }
    results.hidden = query.length < 2;
    const list = results.querySelector("ol");
    list.replaceChildren(...[...matches].slice(0, 200).map((id) => {
      const n = nodeById.get(id);
      return nodeItem(n, " \u00b7 " + frameTitle(frameById.get(classById.get(n.class).frame)));
    }));
    results.querySelector("h2").textContent = "Search: " + matches.size + " e-node(s)" + (matches.size > 200 ? " (first 200)" : "");
    cy.batch(() => {
      cy.nodes().removeClass("match has-match");
      matches.forEach((id) => drawn(id).addClass("match"));
      matchFrames.forEach((id) => cy.$id(id).addClass("has-match"));
    });
  }
  let searchTimer = null;
  search.addEventListener("input", () => { clearTimeout(searchTimer); searchTimer = setTimeout(runSearch, 200); });

  // --- toolbar -----------------------------------------------------------------------

  const zoomBy = (factor) => cy.zoom({ level: cy.zoom() * factor, renderedPosition: { x: cy.width() / 2, y: cy.height() / 2 } });
  document.getElementById("zoom-in").addEventListener("click", () => zoomBy(1.3));
  document.getElementById("zoom-out").addEventListener("click", () => zoomBy(1 / 1.3));
  document.getElementById("fit").addEventListener("click", () => cy.fit(cy.elements(), 30));
  document.getElementById("show-critical").addEventListener("click", () => reveal(DATA.critical.flatMap((c) => c.nodes)));
  document.getElementById("expand-all").addEventListener("click", () => { DATA.frames.forEach((f) => expanded.add(f.id)); draw(null); });
  document.getElementById("collapse-all").addEventListener("click", () => { expanded.clear(); expanded.add(ROOT); draw(null); });
  document.getElementById("extracted-only").addEventListener("change", (event) => { extractedOnly = event.target.checked; draw(null); });

  summary();
  criticalList();
  outline();
  draw(null);
  window.egadViz = { cy, data: DATA, toggle, reveal, expanded, search: runSearch };
})();
