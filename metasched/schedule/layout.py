"""``transform_layout``: an intermediate buffer stored with its dimensions in another order.
A packed panel read across its memory order (``K[b, j, d]`` of ``Q K^T``, read along ``j``)
stored ``[b, d, j]`` makes that read contiguous, so it vectorizes without a gather."""
from __future__ import annotations

from metasched.errors import ScheduleError
from metasched.lower import ScheduleState, StageState


def transform_layout(state: ScheduleState, stage: StageState, order: object) -> None:
    primitive = "transform_layout"
    st = stage.statement
    n = len(st.shape)
    if (not isinstance(order, (list, tuple)) or any(isinstance(k, bool) or not isinstance(k, int) for k in order)
            or sorted(order) != list(range(n))):
        raise ScheduleError(f"{primitive}: order must list the {n} dimensions of {st.name} "
                            f"(a permutation of 0..{n - 1}), got {order!r}")
    if st.is_output:
        raise ScheduleError(f"{primitive}: block {stage.name} writes output {st.name}, whose layout the caller "
                            f"gives; only an intermediate buffer can be laid out anew")
    new = tuple(order)
    if stage.layout is not None:  # a second transform applies to the first's result
        new = tuple(stage.layout[k] for k in new)
    stage.layout = None if new == tuple(range(n)) else new
