"""``replay``: a trace run again on a workload, the one place where traces become schedules.

Search replays all the time: a design space with its sampling instructions left free gives a
new program for every random stream; a mutator replays a trace with one decision changed and
learns, through a decision provider, which decisions are legal at that point; a
post-processed trace is cut back to its sampling part (``remove_postproc``) before the
postprocessors run again.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from metasched.errors import ScheduleError
from metasched.lang.workload import Workload
from metasched.schedule.instruction import KINDS, RV, Instruction
from metasched.schedule.schedule import Schedule, Seed
from metasched.schedule.trace import Trace

# decision_provider(sch, index, inst, inputs, decision) -> the decision to use (None: sample).
DecisionProvider = Callable[[Schedule, int, Instruction, list, Any], Any]


def replay(workload: Workload, trace: Trace, *, rng: Seed = 0,
           decision_provider: Optional[DecisionProvider] = None, remove_postproc: bool = False) -> Schedule:
    """A new schedule of ``workload`` made by running ``trace``'s instructions in order, every
    precondition checked again; the new schedule's trace names its random variables as
    ``trace`` does.

    * ``rng`` (a non-negative integer or a ``numpy.random.Generator``) draws the sampling
      instructions that have no decision, so one ``rng`` always gives one program.
    * ``decision_provider(sch, index, inst, inputs, decision)``, if given, is asked before each
      sampling instruction runs: ``sch`` is the schedule so far, ``inputs`` the instruction's
      inputs as handles of ``sch`` (so that ``metasched.schedule.analysis`` can answer
      questions about them), ``decision`` the trace's decision or None; it returns the
      decision to use, None to draw one.
    * ``remove_postproc``: stop at the ``enter_postproc`` mark, leaving out what the
      postprocessors did.

    A ``ScheduleError`` names the instruction that failed: its index and its text."""
    if not isinstance(trace, Trace):
        raise ScheduleError(f"replay needs a Trace (Trace.parse(text) or Trace.from_json(obj)), "
                            f"got {type(trace).__name__}")
    sch = Schedule(workload, rng)
    decisions = trace.decisions
    rvs: dict[str, RV] = {}
    for index, inst in enumerate(trace.insts):
        kind = KINDS[inst.kind]
        if remove_postproc and inst.kind == "EnterPostproc":
            break
        inputs = [rvs[x.name] if isinstance(x, RV) else x for x in inst.inputs]
        decision = decisions.get(index)
        try:
            if decision_provider is not None and kind.sampling:
                decision = decision_provider(sch, index, inst, list(inputs), decision)
            args, keywords = _arguments(kind, inputs, list(inst.attrs))
            if kind.sampling:
                keywords["decision"] = decision
            result = getattr(sch, kind.method)(*args, **keywords)
        except ScheduleError as err:
            raise ScheduleError(f"{_where(trace, index)}: {err}") from None
        outs = [] if result is None else list(result) if isinstance(result, list) else [result]
        if len(outs) != len(inst.outputs):
            raise ScheduleError(
                f"{_where(trace, index)}: on {workload} it makes {len(outs)} "
                f"output{'s' * (len(outs) != 1)} where the trace names {len(inst.outputs)}; "
                f"the trace may have been recorded on another workload or with other parameters")
        if outs:
            outs = sch._rename_outputs(outs, [out.name for out in inst.outputs])
        rvs.update((out.name, out) for out in outs)
    return sch


def _arguments(kind, inputs: list, attrs: list) -> tuple[list, dict]:
    """The positional and keyword arguments of ``kind``'s method for a trace's inputs and
    attributes."""
    args: list = []
    keywords: dict = {}
    for param in kind.params:
        if param.role == "input":
            value = inputs.pop(0)
        elif param.role == "inputs":
            args.extend(inputs)
            inputs = []
            continue
        elif param.role == "input_list":
            value, inputs = list(inputs), []
        else:
            value = attrs.pop(0)
        if param.keyword:
            keywords[param.name] = value
        else:
            args.append(value)
    return args, keywords


def _where(trace: Trace, index: int) -> str:
    """``instruction 3 `l4, l5 = sch.split(l1, [None, 8])``` for a replay error."""
    decision = trace.decisions.get(index)
    return f"instruction {index} `{str(Trace((trace.insts[index],), {} if decision is None else {0: decision}))}`"
