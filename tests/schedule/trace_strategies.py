"""Hypothesis strategies for traces: random, well-formed traces built straight from ``KINDS``.

No schedule runs. Each instruction has a random kind; its inputs are earlier outputs or random
literals, its attributes random literals, its outputs fresh names; a sampling instruction may
carry a decision of the right shape. Such a trace need not replay on any workload, but it must
survive the text and JSON forms unchanged.
"""
from __future__ import annotations

from hypothesis import strategies as st

from metasched.ir.limits import INT64_MAX, INT64_MIN
from metasched.schedule.instruction import KINDS, Instruction, output_count
from metasched.schedule.trace import Trace

# Integers as a trace's text and JSON forms hold them: signed 64-bit.
_SCALARS = (st.none() | st.booleans() | st.integers(INT64_MIN, INT64_MAX)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6))

# Literals as instructions hold them: scalars, and tuples of literals (written as lists).
literals = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=5)


@st.composite
def traces(draw, max_instructions: int = 10) -> Trace:
    """A random trace of up to ``max_instructions`` instructions."""
    defined = []
    insts: list[Instruction] = []
    decisions = {}

    def input_value():
        if defined and draw(st.booleans()):
            return draw(st.sampled_from(defined))
        return draw(literals)

    for _ in range(draw(st.integers(0, max_instructions))):
        kind = KINDS[draw(st.sampled_from(sorted(KINDS)))]
        inputs, attrs = [], []
        for param in kind.params:
            if param.role == "input":
                inputs.append(input_value())
            elif param.role in ("inputs", "input_list"):
                inputs.extend(input_value() for _ in range(draw(st.integers(0, 3))))
            else:
                attrs.append(draw(literals))
        if kind.name in ("SamplePerfectTile", "SampleImperfectTile"):
            attrs[0] = draw(st.integers(1, 4))  # n: the number of factors, and of outputs
        count = output_count(kind, tuple(inputs), tuple(attrs))
        count = draw(st.integers(0, 3)) if count is None else count
        # Names as a schedule makes them: the class's prefix and a number unique in the trace.
        cls = kind.output_class  # None for a kind without outputs (then count is 0)
        outputs = tuple(cls(f"{cls.prefix}{len(defined) + i}") for i in range(count))
        if kind.sampling and draw(st.booleans()):
            one = st.integers(-3, 64)
            decisions[len(insts)] = tuple(draw(one) for _ in outputs) if kind.outputs == "list" else draw(one)
        insts.append(Instruction(kind.name, tuple(inputs), tuple(attrs), outputs))
        defined.extend(outputs)
    return Trace(tuple(insts), decisions)
