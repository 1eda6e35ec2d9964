"""The extraction visualiser: why egad chose the term it chose, as one HTML page.

    f = egad.optimize(egad.trace(loss, W, U, xs, h0), wrt=(0, 1))
    f(W, U, xs, h0)                                  # the first call optimizes and builds
    egad.viz.render(f, "loss.html")                  # or an egad.optimizer.Optimization

or from the shell, `egad viz -o gnmt.html` (GNMT-lite `tiny`'s gradient; egad/cli_viz.py).

The page is self-contained (no network: the libraries and the data are inlined) and
shows the saturated e-graph (`Optimization.graph`, an egraph/record.py
`EGraphRecord`):

- e-classes grouped by region: loops and branches are nested frames that start
  collapsed (a frame is one box with its counts until clicked), so a graph of
  thousands of e-nodes opens with only the program's top level drawn;
- every e-node with its op and cost (one execution, by the cost model the extractor
  used: roofline seconds plus dispatch), the extracted term highlighted, and each
  loop's gradient-critical path (the longest latency chain from a carried value to
  the next one, as egad/critical_path.py measures it on the decoded program, but
  found on the extracted e-nodes so it can be drawn on them);
- the rule that introduced each e-node (kebab-case name and file:line; "input" for
  the program as written), the predicted cost before and after, the program before
  and after side by side, search by op or rule name, zoom and pan.

Why cytoscape.js and dagre (vendored in egad/viz_assets/, both MIT): an e-graph is a
dataflow DAG with nested regions, which a layered (Sugiyama) layout draws readably,
and dagre is the maintained JavaScript implementation of one (@dagrejs, 49 kB).
cytoscape.js is an actively maintained graph viewer: canvas rendering that copes
with thousands of elements, compound nodes for regions and e-classes, zoom and pan
built in. Graphviz would need a system binary or a WebAssembly build; ELK
(elkjs) is 1.6 MB, EPL-licensed, and was no faster on GNMT-lite. viz_assets/viz.js
calls dagre once per open region, so that each region is laid out as one block
(cytoscape-dagre's compound layout spread loop bodies over the whole drawing and
took twice as long); opening and closing regions rebuilds what is drawn.
"""
from __future__ import annotations

import html
import json
import pathlib
import re
from importlib import resources

import numpy as np

from .errors import EgadError, message

ASSETS = ("cytoscape.min.js", "dagre.min.js", "viz.css", "viz.js")
_ASSET_DIRECTORY = "viz_assets"  # beside this module, installed as package data
_PLACEHOLDERS = ("/*@TITLE@*/", "/*@CSS@*/", "/*@LIBRARIES@*/", "/*@DATA@*/", "/*@APP@*/")
_PLACEHOLDER = re.compile("|".join(re.escape(placeholder) for placeholder in _PLACEHOLDERS))


def render(optimized, path, specialization: int = 0) -> pathlib.Path:
    """Write the visualiser page for `optimized` (what `egad.optimize` returned, after
    its first call or built with `example_args=`; or one `egad.optimizer.Optimization`)
    to `path`, and return the path. `specialization` picks one of several shape
    signatures (`optimized.optimizations[k]`).

        egad.viz.render(f, "report.html")   # then open report.html in a browser
    """
    if not isinstance(path, (str, pathlib.PurePath)) or not str(path):
        raise EgadError(message(f"egad.viz.render needs the path of the page to write, got {path!r}",
                                instead='give the path of an .html file, e.g. egad.viz.render(f, "report.html")'))
    optimization = _optimization_of(optimized, specialization)
    from .viz_data import page_data

    data = page_data(optimization)
    path = pathlib.Path(path)
    try:
        path.write_text(page(data), encoding="utf-8")
    except OSError as error:  # a directory, a folder that does not exist, no permission
        raise EgadError(message(f"egad.viz.render could not write {path}: {error.strerror or error}",
                                instead="give the path of an .html file in a folder that exists")) from None
    return path


def page(data: dict) -> str:
    """The HTML page for `page_data(...)`: the template with the assets and data inlined."""
    assets = resources.files("egad") / _ASSET_DIRECTORY
    template = (assets / "viz.html").read_text(encoding="utf-8")
    libraries = "\n".join(_script((assets / name).read_text(encoding="utf-8"))
                          for name in ASSETS if name.endswith(".min.js"))
    # "</script" inside a script element ends it early, and "<!--<script" makes the parser
    # look for two ends: no "<" at all (JSON's \u003c is the same character)
    payload = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    parts = {
        "/*@TITLE@*/": html.escape(data["title"]),
        "/*@CSS@*/": "<style>\n" + (assets / "viz.css").read_text(encoding="utf-8") + "\n</style>",
        "/*@LIBRARIES@*/": libraries,
        "/*@DATA@*/": f'<script type="application/json" id="egad-data">{payload}</script>',
        "/*@APP@*/": _script((assets / "viz.js").read_text(encoding="utf-8")),
    }
    for placeholder in _PLACEHOLDERS:
        if template.count(placeholder) != 1:
            raise EgadError(f"egad/viz_assets/viz.html must hold {placeholder} once (a broken install?)")
    # one pass: a part inserted (a title holding "/*@APP@*/") is never searched again
    return _PLACEHOLDER.sub(lambda match: parts[match.group(0)], template)


def _script(source: str) -> str:
    if "</script" in source.lower():
        raise EgadError("a visualiser asset contains '</script', which would end its inline script early")
    return f"<script>\n{source}\n</script>"


def _optimization_of(optimized, specialization: int):
    from .api import Optimized
    from .optimizer import Optimization

    if isinstance(optimized, Optimized):
        if not optimized.optimizations and optimized.example_args is not None and optimized.families:
            optimized.program  # builds the traced shapes with example_args, which runs the optimizer
        records = optimized.optimizations
        if not records:
            why = ("it was built with rules=(), which skips the e-graph" if not optimized.families else
                   "it has not been called yet, and the optimizer runs at the first call")
            raise EgadError(message(f"egad.viz.render: {optimized.traced.name} has no optimizer result: {why}",
                                    instead="call it once (or pass example_args= to egad.optimize), with rules "
                                    "(the default)"))
        if isinstance(specialization, bool) or not isinstance(specialization, (int, np.integer)) \
                or not 0 <= specialization < len(records):
            raise EgadError(message(f"egad.viz.render: specialization {specialization!r} does not exist; "
                                    f"{optimized.traced.name} has {len(records)}",
                                    instead=f"pass specialization= between 0 and {len(records) - 1}"))
        optimized = records[specialization]
    if not isinstance(optimized, Optimization):
        raise EgadError(message(f"egad.viz.render needs what egad.optimize returned or an "
                                f"egad.optimizer.Optimization, got {type(optimized).__name__}",
                                instead="egad.viz.render(egad.optimize(program), path) after its first call"))
    if optimized.graph is None:
        raise EgadError(message(f"egad.viz.render: the optimization of {optimized.original.name} kept no e-graph "
                                f"({optimized.fallback or 'it ran before e-graphs were recorded'})",
                                instead="fix what the fallback names, or optimize with the default rules"))
    return optimized

