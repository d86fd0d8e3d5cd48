"""A store method that hands the call to one of the store's capabilities.

``store.mark_finished(t)`` is ``store.ledger.mark_finished(t)``: the names callers used when
the store was one class keep working, typed as the capability's own method. On a store that
lacks the capability the call raises the store's refusal for it (:meth:`Store.missing`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

if TYPE_CHECKING:
    from durability.stores.base import Store

P = ParamSpec("P")
R = TypeVar("R")


class Delegate(Generic[P, R]):
    """``store.<name>(…)`` → ``store.<capability>.<method>(…)``."""

    def __init__(self, capability: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self.capability = capability
        self.method = method.__name__
        self.__doc__ = f"Delegates to ``store.{capability}.{self.method}`` (see there)."

    @overload
    def __get__(self, store: None, owner: type) -> Delegate[P, R]: ...

    @overload
    def __get__(self, store: Store, owner: type) -> Callable[P, R]: ...

    def __get__(self, store: Store | None, owner: type) -> Delegate[P, R] | Callable[P, R]:
        if store is None:
            return self
        target = getattr(store, self.capability)
        if target is None:
            return self._refuse(store)
        bound: Callable[P, R] = getattr(target, self.method)
        return bound

    def _refuse(self, store: Store) -> Callable[P, R]:
        def refuse(*_args: P.args, **_kwargs: P.kwargs) -> R:
            action = self.method.replace("_", " ")
            raise store.missing(self.capability, action)

        return refuse
