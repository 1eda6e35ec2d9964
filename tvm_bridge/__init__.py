"""Lowering of egad programs to TVM Relax, installed as `egad.tvm_bridge`.

The only layer that imports TVM (DESIGN §2, §7); it arrives with the lowering issue.
"""
