"""Round trips of drawn schedules' traces: text, JSON, and replay to the identical program."""
import json

import pytest
from hypothesis import given, settings

from conftest import SMALL_PARAMS
from metasched import Schedule, Trace, replay, workloads
from metasched.testing import schedules


@pytest.mark.parametrize("name", sorted(SMALL_PARAMS))
def test_trace_round_trips(name):
    wl = workloads.get(name, **SMALL_PARAMS[name])

    @given(schedules(wl, max_steps=10))
    @settings(max_examples=40)  # cheap: nothing is compiled
    def check(sch):
        trace = sch.trace
        assert Trace.parse(str(trace)) == trace
        assert Trace.from_json(json.loads(json.dumps(trace.to_json()))) == trace
        again = replay(wl, trace)
        assert again.trace == trace
        assert str(again) == str(sch)
        simple = trace.simplified()
        assert str(replay(wl, simple)) == str(sch)

    check()
