"""A bounded set of recently seen keys (event ids, message ids, threads) that a platform
package keeps in memory: the oldest is forgotten first, so it never grows for good."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable


class Recent:
    """A bounded set of recently seen keys, oldest forgotten first."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._keys: OrderedDict[Hashable, None] = OrderedDict()

    def add(self, key: Hashable) -> bool:
        """Remember ``key``; False if it was already known."""
        if key in self._keys:
            self._keys.move_to_end(key)
            return False
        self._keys[key] = None
        if len(self._keys) > self.size:
            self._keys.popitem(last=False)
        return True

    def discard(self, key: Hashable) -> None:
        self._keys.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._keys
