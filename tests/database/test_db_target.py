"""Target: when two machines count as the same, its key and its JSON form."""
import pytest

from metasched.database import Target


def test_compatible_ignores_feature_order_and_disabled_features():
    a = Target("znver4", "+avx2,+fma,-avx512f,-sse4a", 2)
    b = Target("znver4", "-sse4a,+fma,+avx2", 2)
    assert a.compatible(b) and b.compatible(a)
    assert a.key == b.key
    assert a.enabled_features == {"avx2", "fma"}


@pytest.mark.parametrize("other", [
    Target("znver3", "+avx2,+fma", 2),           # another CPU
    Target("znver4", "+avx2,+fma,+avx512f", 2),  # one more feature enabled
    Target("znver4", "+avx2", 2),                # one fewer
    Target("znver4", "+avx2,+fma", 1),           # another thread count
])
def test_incompatible_targets_differ_in_key(other):
    base = Target("znver4", "+avx2,+fma", 2)
    assert not base.compatible(other) and not other.compatible(base)
    assert base.key != other.key


def test_key_is_fixed():
    # Written out so that a change of the canonical form, which would orphan every stored
    # record, cannot pass unnoticed.
    assert Target("znver4", "+fma,+avx2", 2).key == "fa4a07e607ed66040b07099d"
    assert Target("znver4", "+avx2,+fma,-x", 2).key == "fa4a07e607ed66040b07099d"


def test_json_round_trip_keeps_the_feature_string():
    target = Target("znver4", "+fma,+avx2,-avx512f", 8)
    again = Target.from_json(target.to_json())
    assert again == target and again.features == "+fma,+avx2,-avx512f"


@pytest.mark.parametrize("args, message", [
    (("", "+avx2", 1), "cpu"),
    (("znver4", None, 1), "feature string"),
    (("znver4", "+avx2,fma", 1), "'fma'"),
    (("znver4", "+avx2", 0), "num_threads"),
    (("znver4", "+avx2", True), "num_threads"),
    (("znver4", "+avx2", 1.5), "num_threads"),
])
def test_malformed_targets_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        Target(*args)


@pytest.mark.parametrize("form", [None, {"cpu": "znver4"}, {"cpu": "x", "features": "", "num_threads": 1, "z": 0}])
def test_malformed_json_is_refused(form):
    with pytest.raises(ValueError, match="JSON form"):
        Target.from_json(form)
