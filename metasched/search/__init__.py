"""Search strategies: what to measure next. ``"replay"`` (``ReplaySearch``) samples the space at
random without repeating a program; learned search comes next."""
from typing import Union

from metasched.search.replay_search import ReplaySearch
from metasched.search.strategy import SearchContext, SearchStrategy

STRATEGIES = {"replay": ReplaySearch}


def make_strategy(strategy: Union[str, SearchStrategy]) -> SearchStrategy:
    """A strategy by name (``STRATEGIES``), or the given instance."""
    if isinstance(strategy, SearchStrategy):
        return strategy
    try:
        return STRATEGIES[strategy]()
    except (KeyError, TypeError):
        raise ValueError(f"unknown search strategy {strategy!r}; the strategies are "
                         f"{', '.join(sorted(STRATEGIES))}, or pass a SearchStrategy") from None


__all__ = ["ReplaySearch", "STRATEGIES", "SearchContext", "SearchStrategy", "make_strategy"]
