"""``AutoInline``: Ansor's rules 1 and 2 (skip, or always inline a strictly inlinable block),
MetaSchedule's ``auto_inline.cc``.

An element-wise stage such as conv2d's padding ``P`` or softmax's ``e`` costs a full pass over
memory when it is stored; substituted into the blocks that read it, it costs a few arithmetic
operations in their inner loops. The rule inlines such a block into its consumers
(``compute_inline``), or, with ``into_producer``, folds it into its only producer
(``reverse_compute_inline``). Legality is read from ``analysis`` facts first, so the rule never
emits an instruction that fails.

``can_compute_inline`` and ``can_reverse_compute_inline`` are shared with ``MultiLevelTiling``,
which folds an epilogue into its cache's copy-out.
"""
from __future__ import annotations

import dataclasses

from metasched.schedule import BlockRV, Schedule, analysis
from metasched.schedule.analysis import BlockInfo
from metasched.space.base import ScheduleRule


def _has_attached(info: BlockInfo) -> bool:
    """Whether some block is computed at one of ``info``'s loops."""
    return any(loop.attached for loop in info.loops)


def can_compute_inline(info: BlockInfo) -> bool:
    """Whether ``compute_inline`` accepts the block and has somewhere to put it: a spatial,
    non-output block with consumers and no block computed at its loops."""
    return (not info.is_output and not info.is_reduction and bool(info.consumers)
            and not _has_attached(info))


def can_reverse_compute_inline(sch: Schedule, block: BlockRV, producer: BlockRV) -> bool:
    """Whether ``reverse_compute_inline(block)`` folds ``block`` into ``producer``: both spatial
    and at the root, ``producer`` the only block ``block`` reads and ``block`` the only one
    that reads it, read at ``block``'s own indices over the same shape, and not an output
    (its tensor would disappear)."""
    info, source = analysis.block(sch, block), analysis.block(sch, producer)
    return (not info.is_reduction and info.attached_to is None and not _has_attached(info)
            and info.producers == (source.name,) and source.consumers == (info.name,)
            and not source.is_reduction and not source.is_output and source.attached_to is None
            and source.shape == info.shape and info.reads_at_own_indices(source.buffer))


@dataclasses.dataclass
class AutoInline(ScheduleRule):
    """Inline strictly element-wise blocks.

    * ``into_consumer``: ``compute_inline`` a spatial, non-output block into its consumers.
    * ``into_producer``: otherwise ``reverse_compute_inline`` it into its only producer, where
      legal (off by default, as in TVM's CPU rules: a producer with several consumers would
      be recomputed).
    * ``disallow_if_then_else``: keep blocks whose body has a conditional (a padding stage).
    * ``disallow_ops``: keep blocks that apply any of these functions (``"exp"``, ``"max"``,
      ... as written in the workload language); ``cpu_default()`` bars ``exp``, as TVM's CPU
      default does.

    "Strictly" is TVM's ``require_injective`` and ``require_ordered``: the block must be
    ``analysis``'s element-wise (every tensor of its rank read at its own indices, in order).
    Unlike TVM, the restrictions hold in all-spatial workloads too."""

    into_producer: bool = False
    into_consumer: bool = True
    disallow_if_then_else: bool = False
    disallow_ops: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.disallow_ops, str):
            raise ValueError(f"AutoInline: disallow_ops must be a tuple of function names, such as "
                             f"('exp',), not the string {self.disallow_ops!r}")
        self.disallow_ops = tuple(self.disallow_ops)
        unknown = sorted(set(self.disallow_ops) - analysis.FUNCTION_NAMES)
        if unknown:
            raise ValueError(f"AutoInline: disallow_ops names unknown function(s) {', '.join(unknown)}; "
                             f"the functions are {', '.join(sorted(analysis.FUNCTION_NAMES))}")

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        info = analysis.block(sch, block)
        if not self._may_inline(info):
            return [sch]
        if self.into_consumer and can_compute_inline(info):
            sch.compute_inline(block)
            return [sch]
        if self.into_producer and len(info.producers) == 1:
            return [self._into_producer(sch, block)]
        return [sch]

    def _may_inline(self, info: BlockInfo) -> bool:
        """Whether the block is strictly element-wise and none of the options bars it."""
        if not info.is_elementwise:
            return False
        if self.disallow_if_then_else and info.has_conditional:
            return False
        return not (self.disallow_ops and info.functions & set(self.disallow_ops))

    @staticmethod
    def _into_producer(sch: Schedule, block: BlockRV) -> Schedule:
        """``sch`` with ``block`` folded into its producer, or ``sch`` unchanged where that is
        not legal. The producer is looked up on a copy, so that a refusal leaves no
        ``get_producers`` in ``sch``'s trace."""
        trial = sch.copy()
        (producer,) = trial.get_producers(block)
        if not can_reverse_compute_inline(trial, block, producer):
            return sch
        trial.reverse_compute_inline(block)
        return trial
