"""How many password hashes an address may spend on logins that fail. Each check that runs the hash
takes a token from the address's bucket and a success gives it back; the bucket refills steadily.
An empty bucket answers 429 without hashing, whatever the password (so no oracle either): wrong
guesses cannot burn the CPU. Behind a reverse proxy every client has the proxy's address and shares
one bucket: a guesser can then hold off new logins while he keeps at it (logins already cached in
login_cache.py still pass), but still not burn the CPU."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

BURST = 10  # failed logins in a row before an address has to wait
REFILL_S = 6.0  # then one more every this many seconds: 10 a minute
MAX_ADDRESSES = 4096  # past this, the least recently seen address starts afresh: memory stays bounded


class FailureThrottle:
    def __init__(
        self,
        burst: int = BURST,
        refill_s: float = REFILL_S,
        max_addresses: int = MAX_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._burst = float(burst)
        self._refill_s = refill_s
        self._max_addresses = max_addresses
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (tokens, as of)
        self._lock = threading.Lock()

    def take(self, address: str) -> float:
        """0 if a hash may run for `address` now (a token is taken), else the seconds until one may."""
        now = self._clock()
        with self._lock:
            tokens = self._tokens(address, now)
            if tokens < 1:
                return (1 - tokens) * self._refill_s
            self._set(address, tokens - 1, now)
            return 0.0

    def give_back(self, address: str) -> None:
        """The hash accepted the password: that login costs the address nothing."""
        now = self._clock()
        with self._lock:
            self._set(address, min(self._burst, self._tokens(address, now) + 1), now)

    def _tokens(self, address: str, now: float) -> float:
        tokens, since = self._buckets.get(address, (self._burst, now))
        return min(self._burst, tokens + (now - since) / self._refill_s)

    def _set(self, address: str, tokens: float, now: float) -> None:
        self._buckets[address] = (tokens, now)
        self._buckets.move_to_end(address)
        while len(self._buckets) > self._max_addresses:
            self._buckets.popitem(last=False)
