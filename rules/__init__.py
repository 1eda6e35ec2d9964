"""Rewrite-rule families for egad's e-graph optimizer, installed as `egad.rules`.

One file per family (algebra, ad_simplify, loop_invariant, batching, fusion,
checkpoint, control, unroll) arrives with the e-graph optimizer; see DESIGN §5.
"""
