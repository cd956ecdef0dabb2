"""The built-in suite end to end at default sizes: parse, compile unscheduled, match the
reference; and the numpy baselines the benchmarks use agree with the reference too."""
import numpy as np
import pytest

import metasched
from metasched import workloads
from metasched.workloads.baselines import numpy_baseline


@pytest.mark.parametrize("name", workloads.names())
def test_unscheduled_kernel_matches_reference_at_default_size(name):
    wl = workloads.get(name)
    inputs = wl.random_inputs(seed=1)
    metasched.assert_outputs_close(wl, metasched.build(wl)(*inputs), wl.reference(*inputs))


@pytest.mark.parametrize("name", workloads.names())
def test_numpy_baseline_matches_reference(name):
    wl = workloads.get(name)
    baseline = numpy_baseline(wl)
    assert baseline is not None, f"no numpy baseline for built-in workload {name}"
    inputs = wl.random_inputs(seed=2)
    got = [np.asarray(x, dtype=wl.dtype) for x in baseline(*inputs)]
    metasched.assert_outputs_close(wl, got, wl.reference(*inputs))


def test_suite_is_a_copy_of_the_shared_benchmark_files():
    import pathlib

    shared = pathlib.Path(__file__).resolve().parents[2] / "shared" / "workloads"
    if not shared.is_dir():
        pytest.skip("../shared/workloads is not beside this checkout")
    for path in shared.glob("*.tensor"):
        assert workloads.source(path.stem) == path.read_text(), f"{path.name} differs from the built-in copy"
    assert sorted(p.stem for p in shared.glob("*.tensor")) == workloads.names()
