"""Python-like text of expressions and loop programs: what ``str(schedule)`` shows a person."""
from __future__ import annotations

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
)
from metasched.ir.stmt import Allocate, For, ForKind, IfThenElse, PrimFunc, Seq, Stmt, Store

# Binding strength, loosest first, as in Python.
_PRECEDENCE = {
    "if": 0, "or": 1, "and": 2, "not": 3,
    "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4,
    "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6, "neg": 7, "atom": 8,
}


def _prec(e: Expr) -> int:
    if isinstance(e, BinOp) and e.op not in ("max", "min"):
        return _PRECEDENCE[e.op]
    if isinstance(e, Select):
        return _PRECEDENCE["if"]
    if isinstance(e, Not):
        return _PRECEDENCE["not"]
    if isinstance(e, Neg):
        return _PRECEDENCE["neg"]
    if isinstance(e, IntImm) and e.value < 0:
        return _PRECEDENCE["neg"]
    return _PRECEDENCE["atom"]


def _wrap(e: Expr, min_prec: int) -> str:
    text = expr_str(e)
    return f"({text})" if _prec(e) < min_prec else text


def expr_str(e: Expr) -> str:
    """One expression as Python-like text."""
    if isinstance(e, IntImm):
        return str(e.value)
    if isinstance(e, FloatImm):
        return repr(float(e.value))
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Load):
        return f"{e.buffer}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, BinOp):
        if e.op in ("max", "min"):
            return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
        p = _PRECEDENCE[e.op]
        # Left-associative: the right operand needs brackets at equal precedence.
        return f"{_wrap(e.a, p)} {e.op} {_wrap(e.b, p + 1)}"
    if isinstance(e, Neg):
        return f"-{_wrap(e.a, _PRECEDENCE['neg'])}"
    if isinstance(e, Not):
        return f"not {_wrap(e.a, _PRECEDENCE['not'])}"
    if isinstance(e, Call):
        return f"{e.func}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, Select):
        return f"{_wrap(e.true_value, 1)} if {_wrap(e.cond, 1)} else {_wrap(e.false_value, 0)}"
    if isinstance(e, Cast):
        return f"{e.dtype_}({expr_str(e.value)})"
    raise TypeError(f"not an expression: {e!r}")


def _lines(s: Stmt, depth: int, out: list[str]) -> None:
    pad = "    " * depth
    if isinstance(s, Seq):
        for sub in s.stmts:
            _lines(sub, depth, out)
    elif isinstance(s, For):
        rng = f"range({s.extent})" if s.kind is ForKind.SERIAL else f"{s.kind.value}({s.extent})"
        notes = "".join(f"  # {k} = {v!r}" for k, v in s.annotations)
        out.append(f"{pad}for {s.var} in {rng}:{notes}")
        _lines(s.body, depth + 1, out)
    elif isinstance(s, IfThenElse):
        out.append(f"{pad}if {expr_str(s.cond)}:")
        _lines(s.then_body, depth + 1, out)
        if s.else_body is not None:
            out.append(f"{pad}else:")
            _lines(s.else_body, depth + 1, out)
    elif isinstance(s, Allocate):
        b = s.buffer
        out.append(f"{pad}{b.name} = allocate({list(b.shape)}, {b.dtype!r})")
        _lines(s.body, depth, out)
    elif isinstance(s, Store):
        idx = ", ".join(expr_str(i) for i in s.indices)
        out.append(f"{pad}{s.buffer}[{idx}] = {expr_str(s.value)}")
    else:
        raise TypeError(f"not a statement: {s!r}")


def stmt_str(s: Stmt, depth: int = 0) -> str:
    """A statement tree as indented Python-like text."""
    out: list[str] = []
    _lines(s, depth, out)
    return "\n".join(out)


def func_str(f: PrimFunc) -> str:
    """A whole kernel: its signature, its workspaces, its body."""
    def sig(b):
        return f"{b.name}: {b.dtype}[{', '.join(map(str, b.shape))}]"

    params = ", ".join(sig(b) for b in f.inputs + f.outputs)
    lines = [f"def {f.name}({params}):"]
    for block, notes in f.attrs.get("block_annotations", {}).items():
        lines.extend(f"    # block {block}: {k} = {v!r}" for k, v in notes.items())
    for w in f.workspaces:
        lines.append(f"    {w.name} = allocate({list(w.shape)}, {w.dtype!r})")
    lines.append(stmt_str(f.body, 1))
    return "\n".join(lines)
