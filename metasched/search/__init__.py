"""Search strategies: what to measure next. ``"evolutionary"`` (``EvolutionarySearch``, the
default) evolves programs under a learned cost model; ``"replay"`` (``ReplaySearch``) samples the
space at random without repeating a program."""
from typing import Union

from metasched.search.cost_model import CostModel, GBTModel, RandomModel, pairwise_accuracy
from metasched.search.evolutionary import EvolutionaryConfig, EvolutionarySearch, Round
from metasched.search.features import FEATURE_VERSION, FEATURES, per_store_features
from metasched.search.replay_search import ReplaySearch
from metasched.search.strategy import SearchContext, SearchStrategy

STRATEGIES = {"evolutionary": EvolutionarySearch, "replay": ReplaySearch}
DEFAULT_STRATEGY = "evolutionary"


def make_strategy(strategy: Union[str, SearchStrategy]) -> SearchStrategy:
    """A strategy by name (``STRATEGIES``), or the given instance."""
    if isinstance(strategy, SearchStrategy):
        return strategy
    try:
        return STRATEGIES[strategy]()
    except (KeyError, TypeError):
        raise ValueError(f"unknown search strategy {strategy!r}; the strategies are "
                         f"{', '.join(sorted(STRATEGIES))}, or pass a SearchStrategy") from None


__all__ = ["CostModel", "DEFAULT_STRATEGY", "EvolutionaryConfig", "EvolutionarySearch", "FEATURES",
           "FEATURE_VERSION", "GBTModel", "RandomModel", "ReplaySearch", "Round", "STRATEGIES",
           "SearchContext", "SearchStrategy", "make_strategy", "pairwise_accuracy", "per_store_features"]
