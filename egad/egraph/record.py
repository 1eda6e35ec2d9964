"""What the optimizer saw in the e-graph and what it chose, kept for the visualiser.

`Optimization.graph` (egad/optimizer.py) holds one `EGraphRecord`, filled after
extraction; egad/viz.py draws it:

    record = optimization.graph
    len(record.snapshot.nodes)            # e-classes after saturation
    record.extraction.choice[cid]         # the e-node extraction chose for class cid
    record.origins[node].site             # the rule that introduced it (name, file:line)
    record.encoding.regions[r]            # region r's control op and parent region

It keeps no egglog object: the encoding is kept without its e-graph (its regions,
constants, interface and roots are what the cost model and the region frames read),
and the snapshot without its non-language tables (analyses, rule marks).
"""
from __future__ import annotations

import dataclasses

from .encoding import Encoding
from .enode import ENode
from .extraction import Extraction
from .provenance import Origin
from .snapshot import Snapshot


@dataclasses.dataclass(frozen=True)
class EGraphRecord:
    encoding: Encoding  # without its egglog e-graph (egraph=None)
    snapshot: Snapshot  # e-classes and e-nodes after saturation
    origins: dict[ENode, Origin]  # snapshot e-node -> the rule (or "input") that introduced it
    original: Extraction  # the program as written, as an extraction of the same e-graph
    extraction: Extraction  # what the optimizer decoded (`original` when it kept the program as written)
    cost_model: object  # egad.extract.CostModel the extraction was priced with

    @classmethod
    def of(cls, encoding: Encoding, snapshot: Snapshot, origins, original: Extraction, extraction: Extraction,
           cost_model) -> "EGraphRecord":
        return cls(dataclasses.replace(encoding, egraph=None), Snapshot(snapshot.nodes, snapshot.handles), origins,
                   original, extraction, cost_model)
