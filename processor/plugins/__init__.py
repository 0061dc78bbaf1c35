"""Plugins: how a host finds the observer `--observer` names, and calls it.

`ObserverChoice` is what the options chose, `load_observer_factory` turns it into a factory of
observers (a built-in of `observers.builtin` or a user's `module:Name`), and `ObserverCalls`
calls one observer the same way whatever kind of methods it has (plain ones in the host's
`observer_pool`). The contract itself is
`observers`; nothing here knows about leases or Azure Tables.
"""

from typing import TYPE_CHECKING

from processor.faces import exports

if TYPE_CHECKING:
    from processor.plugins.observer_calls import ObserverCalls, observer_pool
    from processor.plugins.observer_loading import ObserverChoice, load_observer_factory

__getattr__ = exports(__name__)
__all__ = ["ObserverCalls", "ObserverChoice", "load_observer_factory", "observer_pool"]
