"""``replay``: a trace run again on a workload, the one place where traces become schedules.

Search replays all the time: a design space with its sampling instructions left free gives a
new program for every random stream; a mutator replays a trace with one decision changed and
learns, through a decision provider, which decisions are legal at that point; a
post-processed trace is cut back to its sampling part (``remove_postproc``) before the
postprocessors run again.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from metasched.errors import ScheduleError
from metasched.lang.workload import Workload
from metasched.schedule.instruction import KINDS, RV, Call, Instruction, apply, flatten, normalise
from metasched.schedule.schedule import Schedule, Seed
from metasched.schedule.trace import Trace

# decision_provider(sch, index, inst, inputs, decision) -> the decision to use (None: sample).
DecisionProvider = Callable[[Schedule, int, Instruction, list, Any], Any]


def replay(workload: Workload, trace: Trace, *, rng: Seed = 0,
           decision_provider: Optional[DecisionProvider] = None, remove_postproc: bool = False) -> Schedule:
    """A new schedule of ``workload`` made by running ``trace``'s instructions in order, every
    precondition checked again; the new schedule's trace names its random variables as
    ``trace`` does (it holds ``trace``'s very instructions, see ``_recorded``).

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
            call = inst.call  # worked out at the first replay of ``inst``
            args, keywords = call.arguments(inputs, inst.attrs)
            if kind.sampling:
                keywords["decision"] = decision
            result, decision = apply(sch, kind, args, keywords)
        except ScheduleError as err:
            raise ScheduleError(f"{_where(trace, index)}: {err}") from None
        outs = flatten(result)
        if len(outs) != len(inst.outputs):
            raise ScheduleError(
                f"{_where(trace, index)}: on {workload} it makes {len(outs)} "
                f"output{'s' * (len(outs) != 1)} where the trace names {len(inst.outputs)}; "
                f"the trace may have been recorded on another workload or with other parameters")
        if outs:
            names = [out.name for out in inst.outputs]
            outs = sch._rename_outputs(outs, names)
            rvs.update(zip(names, outs))
        sch._record(kind, _recorded(inst, inputs, call, outs), decision)
    return sch


def repaired_decisions(trace: Trace, sch: Schedule) -> list[str]:
    """What replaying ``trace`` (into ``sch``) did to decisions that no longer fit the
    workload (a tile that does not divide the loop, a compute location that is no longer a
    candidate; see the sampling instructions), one line each:
    ``instruction 2 `...`: decision [3, 8] repaired to [4, 8]``."""
    used = sch.trace.decisions
    return [f"{_where(trace, index)}: decision {_shown(given)} repaired to {_shown(used[index])}"
            for index, given in sorted(trace.decisions.items())
            if index in used and used[index] != given]


def _shown(decision: Any) -> str:
    return str(list(decision)) if isinstance(decision, tuple) else str(decision)


def _recorded(inst: Instruction, inputs: list, call: Call, outs: Sequence[RV]) -> Instruction:
    """The instruction that replaying ``inst`` records: a call with the first ``call.taken``
    inputs and attributes of ``inst`` (the replaying schedule's handles, ``inputs``, in place
    of the trace's), which made the handles ``outs`` (renamed as the trace names them).

    That is usually ``inst`` itself, and then ``inst`` is recorded: a trace's handles and
    ``outs`` differ only in the schedule they belong to, which a trace does not record. So
    a replay shares its instructions with the trace it replays (as samples and mutants of
    a design space share its instructions), and analyses that see the same instruction
    objects again can keep what they worked out (``database.program_key`` does). When a
    trace built by hand holds literals a call would record otherwise (a list, a numpy
    integer), more inputs than the method takes or handles of another class than those
    it names, the instruction is made as the call would record it."""
    taken_inputs, taken_attrs = call.taken
    # ``inputs`` holds the trace's literals themselves, so only handles can differ in class.
    if (call.as_is and list(map(type, inputs)) == list(map(type, inst.inputs))
            and list(map(type, outs)) == list(map(type, inst.outputs))):
        return inst
    recorded_inputs = tuple(v if isinstance(v, RV) else normalise(v) for v in inputs[:taken_inputs])
    recorded_attrs = tuple(normalise(a) for a in inst.attrs[:taken_attrs])
    return Instruction(inst.kind, recorded_inputs, recorded_attrs, tuple(outs))


def _where(trace: Trace, index: int) -> str:
    """``instruction 3 `l4, l5 = sch.split(l1, [None, 8])``` for a replay error."""
    decision = trace.decisions.get(index)
    return f"instruction {index} `{str(Trace((trace.insts[index],), {} if decision is None else {0: decision}))}`"
