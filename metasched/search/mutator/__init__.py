"""Mutators: how evolutionary search changes a measured program into its next candidates
(MetaSchedule's ``src/meta_schedule/mutator``), one per file:

* ``Mutator``, the extension point, and ``apply_mutant``: a mutant to a post-processed
  schedule, or None (``mutator``);
* ``MutateTileSize``: a factor moved between two tiles of a ``sample_perfect_tile``, or the
  innermost tile of a ``sample_imperfect_tile`` changed;
* ``MutateUnroll``, ``MutateParallel``: another candidate of the ``sample_categorical`` that an
  unroll or parallel annotation takes its value from; the parallel one keeps only limits that
  parallelise other loops;
* ``MutateComputeLocation``: another legal location of a ``sample_compute_location``;
* ``MutatorSet`` picks one by probability; ``default_mutators``, MetaSchedule's CPU mix;
* ``trace_reading``: what they read of a trace.
"""
from metasched.search.mutator.mutate_compute_location import MutateComputeLocation
from metasched.search.mutator.mutate_parallel import MutateParallel
from metasched.search.mutator.mutate_tile_size import MutateTileSize, tile_moves
from metasched.search.mutator.mutate_unroll import MutateUnroll
from metasched.search.mutator.mutator import Mutator, apply_mutant
from metasched.search.mutator.mutator_set import MutatorSet, default_mutators

__all__ = ["MutateComputeLocation", "MutateParallel", "MutateTileSize", "MutateUnroll", "Mutator", "MutatorSet",
           "apply_mutant", "default_mutators", "tile_moves"]
