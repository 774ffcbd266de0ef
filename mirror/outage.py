"""The target cluster's outages: which errors mean "away for now", and when to try again.

A mirror between datacenters must ride out the other side's outage, whatever it was
doing when it began (preparing a topic that just appeared, asking where a partition
ends, appending, producing). Every step that talks to the target hands its errors to
:func:`is_transient`:

* **transient** (the target is away or busy; waiting helps): every error the client
  library marks ``retriable`` (no broker registered or reachable, connection refused
  or reset, a request timed out, ZooKeeper unreachable, no leader yet, a leader that
  moved, a broker shutting down, too few in-sync replicas) and a socket error
  (``OSError``) that escaped the client. The step is retried, paced by
  :class:`TargetOutage`; nothing is acknowledged meanwhile, so nothing is lost.
* **permanent** (waiting changes nothing; an operator must act): everything else:
  a bad config, TLS or authentication that fails, an authorization refused (the copy
  loops halt that topic alone, mirror/refusals.py), a topic or batch the target
  refuses for good (invalid name or config, too large, corrupt, a full disk), and
  errors that are no :class:`LogferryError` at all (a bug: they propagate as they are).

:class:`TargetOutage` is the one place the copy loops ask whether to talk to the target
now. It is a small state machine, driven by the loops (one thread) with the time they
pass in::

    REACHABLE ──failed()──► AWAY (next try after a bounded backoff) ──ok()──► REACHABLE
                              └──failed() again: the backoff doubles, up to its cap

While AWAY the loops make one probe per backoff interval (:meth:`TargetOutage.may_try`)
rather than one per partition, log loudly (an ERROR line when an outage begins, a
WARNING when it ends) but at most one line of each kind per ``log_every_s``, and
expose the outage (metrics ``target_unavailable_seconds``, ``target_outages_total``,
``target_errors_total{step}``). Once the outage has lasted ``give_up_s`` (the config's
``delivery_timeout_s``) :meth:`TargetOutage.failed` raises
:class:`TargetUnavailableError` and the mirror exits 1. No IO besides the log.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable

from broker.common.errors import LogferryError
from broker.common.ratelimit import RateLimitedLog
from broker.common.retry import Retry
from mirror.errors import MirrorError

log = logging.getLogger("logferry.mirror")

BACKOFF_INITIAL_S = 0.25
"""The first wait after a failed step."""
BACKOFF_MAX_S = 2.0
"""The longest wait between two probes: the mirror resumes at most this long (plus one
probe) after the target returns. 2 s, not the 4 s it was: after a 60 s WAN cut the
wait for the next probe was most of the time the copy took to resume (1.3-8.6 s, the
issue's target being 10 s, on a machine loaded 9-21); a probe costs one query or one
ZooKeeper connect, nothing to spare every 2 s."""
LOG_EVERY_S = 10.0
"""While away, one "still unavailable" line per this many seconds."""


class TargetUnavailableError(MirrorError):
    """The target cluster stayed unreachable longer than the mirror waits
    (``delivery_timeout_s``); nothing after the last acknowledged batch was committed."""


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` means the target is away or busy for now (see the module)."""
    if isinstance(exc, LogferryError):
        return bool(exc.retriable)
    return isinstance(exc, OSError)


class TargetOutage:
    """Whether the target answers, and when the copy loop may try it again."""

    def __init__(
        self,
        give_up_s: float,
        *,
        initial_s: float = BACKOFF_INITIAL_S,
        maximum_s: float = BACKOFF_MAX_S,
        log_every_s: float = LOG_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ):
        self.give_up_s = give_up_s
        self.clock = clock
        self.logger = logger
        self.retry = Retry(initial=initial_s, maximum=maximum_s, jitter=0.25, clock=clock)
        self._still = RateLimitedLog(logger, log_every_s, muted="more failed attempts since the last line", clock=clock)
        self._edges = RateLimitedLog(logger, log_every_s, muted="more since the last line", clock=clock)
        """Outages beginning and ending: one line each per ``log_every_s`` too (a target
        that flaps, or is only partly away, would otherwise log a pair per probe)."""
        self.away_since: float | None = None
        """Clock reading when the current outage began (None: reachable)."""
        self.next_try = 0.0
        """Clock reading before which no step should talk to the target (while away)."""
        self.outages = 0
        """Outages so far (each counted when it begins)."""
        self.errors: defaultdict[str, int] = defaultdict(int)
        """Failed attempts so far, by step."""
        self.last_error = ""
        self.last_outage_s = 0.0
        """How long the last finished outage lasted."""

    @property
    def away(self) -> bool:
        return self.away_since is not None

    def unavailable_s(self, now: float | None = None) -> float:
        """Seconds since the current outage began (0 while the target is reachable)."""
        since = self.away_since
        if since is None:
            return 0.0
        return max(0.0, (self.clock() if now is None else now) - since)

    def may_try(self, now: float | None = None) -> bool:
        """Whether a step may talk to the target now (always, unless away and waiting)."""
        return self.away_since is None or (self.clock() if now is None else now) >= self.next_try

    def wait_s(self, now: float | None = None) -> float:
        """Seconds until :meth:`may_try` (0: now)."""
        if self.away_since is None:
            return 0.0
        return max(0.0, self.next_try - (self.clock() if now is None else now))

    def failed(self, step: str, exc: BaseException) -> float:
        """A step found the target away (``exc`` is transient): start or continue the
        outage and return the seconds until the next try. Raises
        :class:`TargetUnavailableError` once the outage has lasted ``give_up_s``."""
        now = self.clock()
        self.errors[step] += 1
        self.last_error = f"{step}: {exc}"
        if self.away_since is None:
            self.away_since = now
            self.outages += 1
            self.retry.reset()
            self._still.allow()  # the first "still unavailable" line comes log_every_s after this one
            self._edges.log(
                logging.ERROR,
                "MIRROR TARGET UNAVAILABLE: %s (%s). Nothing is lost: the copy waits and "
                "retries (every %g-%gs) for up to %gs (delivery_timeout_s), and resumes "
                "by itself once the target answers.",
                self.last_error,
                type(exc).__name__,
                self.retry.initial,
                self.retry.maximum,
                self.give_up_s,
                key="unavailable",
            )
        else:
            self._still.warning(
                "mirror: the target is still unavailable after %.0fs (%s)", now - self.away_since, self.last_error
            )
        elapsed = now - self.away_since
        if elapsed >= self.give_up_s:
            raise TargetUnavailableError(
                f"the target cluster has been unavailable for {elapsed:.0f}s, longer than "
                f"delivery_timeout_s ({self.give_up_s:g}s); last error: {self.last_error}. "
                "Nothing after the acknowledged batches was committed: start the mirror "
                "again once the target is back"
            )
        delay = self.retry.next_delay()
        self.next_try = now + delay
        return delay

    def ok(self) -> float | None:
        """A step got an answer from the target: end the outage (if one was under way)
        and return how long it lasted (None: there was none)."""
        since = self.away_since
        if since is None:
            return None
        lasted = self.clock() - since
        self.away_since = None
        self.next_try = 0.0
        self.last_outage_s = lasted
        self.retry.reset()
        self._edges.warning(
            "MIRROR TARGET BACK after %.1fs unavailable (%d failed attempts in all so far); copying resumes",
            lasted,
            sum(self.errors.values()),
            key="back",
        )
        return lasted

    def document(self) -> dict[str, object]:
        """For the status file."""
        return {
            "unavailable_s": round(self.unavailable_s(), 3),
            "outages": self.outages,
            "last_outage_s": round(self.last_outage_s, 3),
            "last_error": self.last_error,
        }


__all__ = ["BACKOFF_INITIAL_S", "BACKOFF_MAX_S", "TargetOutage", "TargetUnavailableError", "is_transient"]
