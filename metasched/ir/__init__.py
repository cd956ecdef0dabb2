"""Expression and statement nodes, their analysis and their printing. Knows nothing of search."""
from metasched.ir.analysis import (
    as_affine,
    free_vars,
    from_affine,
    int_bounds,
    loads,
    simplify,
    substitute,
    transform,
    walk,
)
from metasched.ir.expr import (
    BinOp,
    Call,
    Cast,
    Expr,
    FloatImm,
    IntImm,
    Load,
    Neg,
    Not,
    Select,
    Var,
    as_expr,
)
from metasched.ir.stmt import (
    Allocate, Buffer, For, ForKind, IfThenElse, PrimFunc, Seq, Stmt, Store, func_digest, seq,
)

__all__ = [
    "Allocate", "BinOp", "Buffer", "Call", "Cast", "Expr", "FloatImm", "For", "ForKind",
    "IfThenElse", "IntImm", "Load", "Neg", "Not", "PrimFunc", "Select", "Seq", "Stmt", "Store",
    "Var", "as_affine", "as_expr", "free_vars", "from_affine", "func_digest", "int_bounds", "loads", "seq",
    "simplify", "substitute", "transform", "walk",
]
