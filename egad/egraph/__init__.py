"""The e-graph layer (DESIGN §5): egad programs in egglog, and back.

    encoding = encode(program)                 # program -> e-graph (encoding.py, insertion.py)
    snapshot = Snapshot.of(encoding.egraph)     # e-graph -> plain e-nodes (snapshot.py)
    extraction = extract_inserted(snapshot, encoding.provenance.resolve(snapshot), encoding.roots)
    decode(encoding, snapshot, extraction)      # -> a verified Program (placement.py, decoding.py)

`round_trip(program)` does all four. The language is in language.py, the side
tables in constants.py (large constants) and provenance.py (which rule made each
e-node). Between encoding and extraction, `saturate(encoding)` (schedule.py) runs
the rule families of rules/ (egad.rules), reading the analyses of analysis.py and
leaving marks (marks.py) from which each new e-node learns its rule. Nothing here
imports TVM.
"""
from .decoding import decode
from .encoding import Encoding, encode
from .extraction import Extraction, extract_inserted, extract_latest
from .provenance import Origin, Provenance, RuleSite
from .schedule import Limits, SaturationReport, saturate
from .snapshot import Snapshot


def round_trip(program):
    """decode(encode(program)) through the trivial extractor: the same computation,
    with loop-invariant nodes hoisted and duplicates shared."""
    encoding = encode(program)
    snapshot = Snapshot.of(encoding.egraph)
    origins = encoding.provenance.resolve(snapshot)
    return decode(encoding, snapshot, extract_inserted(snapshot, origins, encoding.roots), origins)


__all__ = ["encode", "decode", "round_trip", "Encoding", "Extraction", "extract_inserted", "extract_latest", "Snapshot",
           "Provenance", "Origin", "RuleSite", "saturate", "Limits", "SaturationReport"]
