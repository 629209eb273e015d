"""``python -m clusterman.batch.drainer``: the cluster's notices, filed into each pool's inbox.

Clusterman's module path. Here the drainer does not drain: it reads the cluster's queues (the
warning queue's EventBridge events, and Clusterman's drain and termination queues of hosts:
docs/node_lifecycle.md), finds the pool each instance belongs to (the instances of every pool's
resource groups), and files the notice into that pool's inbox in the state store. The pool's own
autoscaler, under its lease, taints, evicts, replaces and terminates (one actor per pool:
docs/architecture.md says why).

At least once, and idempotently: a message is deleted only once its notices are filed (a process
killed before that leaves it to come back after its visibility timeout); the same notice filed
again changes nothing; a message for no instance of the cluster is deleted with a warning; one
that cannot be read, or that comes back ``notices.max_receives`` times (one whose handling
raised, say), is set aside. Each queue is read in a thread of its own, which nothing ends but the
drainer's stop, and filing takes one lock. Several drainers may run (one in each
pool's tree): the cluster's drainer lease lets one read at a time, so inbox writes never race.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field

from clusterman.aws.session import AwsSettings
from clusterman.batch.arguments import add_program_arguments
from clusterman.batch.arguments import cluster_config_directory
from clusterman.batch.arguments import configure_logging
from clusterman.batch.arguments import load_main
from clusterman.batch.stopping import stop_on_signals
from clusterman.config.loader import cluster_config
from clusterman.config.loader import list_pools
from clusterman.core.config import MainConfig
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.core.notices import Notice
from clusterman.errors import Reported
from clusterman.errors import UserError
from clusterman.notices.events import Rebalance
from clusterman.notices.events import Unreadable
from clusterman.notices.events import notices_of
from clusterman.notices.hosts import HostQueue
from clusterman.notices.hosts import read_host
from clusterman.notices.inbox import Inbox
from clusterman.notices.queue import Message
from clusterman.notices.queue import NoticeQueue
from clusterman.notices.queue import QueueError
from clusterman.state.lease import Holder
from clusterman.state.lease import PoolLease
from clusterman.state.store import StateError
from clusterman.state.store import StateStore
from clusterman.wiring.build import cloud_for
from clusterman.wiring.setup import PoolTarget
from clusterman.wiring.state_store import open_state_store

log = logging.getLogger("clusterman.batch.drainer")

DRAINER = "__drainer__"  # the lease's pool name: one drainer of a cluster reads at a time
LEASE_SECONDS = 60.0
REFRESH_SECONDS = 10.0  # the pools' instances are read again at most this often for an unknown one
BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)  # waits after SQS failed, one after another


@dataclass
class Tally:
    """What the drainer did, counted (for its lines and the tests)."""

    filed: int = 0  # notices new to an inbox
    repeated: int = 0  # notices an inbox already had
    unknown: int = 0  # messages for no instance of the cluster
    ignored: int = 0  # events that say nothing to act on (a rebalance recommendation ignored, ...)
    set_aside: int = 0
    failed: int = 0  # receive or delete calls SQS did not answer
    by_pool: dict[str, int] = field(default_factory=dict)


@dataclass
class Feed:
    """One of the cluster's queues: ``hosts`` says which of Clusterman's host queues it is (None:
    the warning queue, EventBridge events)."""

    queue: NoticeQueue
    hosts: HostQueue | None = None

    @property
    def name(self) -> str:
        return f"{self.hosts.value} queue" if self.hosts is not None else "warning queue"


class Router:
    """Which pool each instance belongs to, and filing notices there."""

    def __init__(
        self,
        main: MainConfig,
        cluster: str,
        directory: str,
        store: StateStore,
        feeds: list[Feed],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.main = main
        self.cluster = cluster
        self.directory = directory
        self.store = store
        self.feeds = feeds
        self.clock = clock
        self.rebalance = Rebalance(main.notices.rebalance)
        self.max_receives = main.notices.max_receives
        self.owners: dict[str, PoolIdentity] = {}
        self.warned: set[PoolIdentity] = set()  # pools that take the cloud's warnings
        self._read_at = -1e18
        self.tally = Tally()
        self._lock = threading.Lock()  # one queue's thread files at a time: inbox writes never race

    def refresh(self, now: float) -> None:
        """Read every pool's groups again: which pool each instance belongs to. A pool whose file or
        groups cannot be read keeps what was known of it."""
        owners = {i: p for i, p in self.owners.items()}
        for identity in list_pools(self.directory, self.cluster):
            try:
                setup = PoolTarget(self.main, identity, self.directory).setup()
                if setup.pool.draining.process_spot_warnings:
                    self.warned.add(identity)
                else:
                    self.warned.discard(identity)
                reading = cloud_for(setup).read(now)
            except Exception as e:  # one pool's trouble is its own: the others are still served
                log.warning("%s: its instances cannot be read (%s): what was known of it stands", identity, e)
                continue
            for i, p in list(owners.items()):
                if p == identity:
                    del owners[i]
            owners.update((instance.instance_id, identity) for instance in reading.view.instances)
        self.owners = owners
        self._read_at = now

    def owner(self, instance: str, now: float) -> PoolIdentity | None:
        if instance not in self.owners and now - self._read_at >= REFRESH_SECONDS:
            self.refresh(now)
        return self.owners.get(instance)

    def read(self, feed: Feed, holding: threading.Event, stop: threading.Event, once: bool = False) -> None:
        """One queue, in a thread of its own, so that a queue SQS holds or refuses delays no other:
        a long poll, then filing what came, while the lease is ``holding``. After SQS failed, a
        wait (``BACKOFF``). Messages received once the lease is lost or the drainer stops are left
        to come back after their visibility timeout. ``once``: one receive."""
        failures = 0
        while not stop.is_set():
            if not holding.wait(1.0):
                continue
            try:
                messages = feed.queue.receive()
                failures = 0
            except Exception as e:  # SQS did not answer (QueueError), or a bug: the thread goes on
                self._count("failed")
                wait = BACKOFF[min(failures, len(BACKOFF) - 1)]
                failures += 1
                log.warning("SQS did not answer for the %s (tried again in %g s): %s", feed.name, wait, e,
                            exc_info=not isinstance(e, QueueError))  # fmt: skip
                if once:
                    return
                stop.wait(wait)
                continue
            if holding.is_set() and not stop.is_set():
                self.handle(feed, messages)
            if once:
                return

    def handle(self, feed: Feed, messages: Iterable[Message]) -> None:
        """File each message's notices, then delete the handled ones together; set aside those
        that cannot be handled. A message not deleted comes back after its visibility timeout."""
        done: list[Message] = []
        for message in messages:
            try:
                with self._lock:
                    handled, aside = self._handle(feed, message)
            except Exception:  # a bug: the message comes back, and after max_receives is set aside
                log.exception("message %s could not be handled (it comes back)", message.id)
                continue
            try:
                if aside:
                    feed.queue.set_aside(message, aside)
                elif handled:
                    done.append(message)
            except QueueError as e:
                self._count("failed")
                log.warning("message %s stays in the queue (it comes back): %s", message.id, e)
        try:
            for message in feed.queue.delete_all(done):
                log.warning("message %s was not deleted: it comes back, and is filed again as a repeat", message.id)
        except QueueError as e:
            self._count("failed")
            log.warning("%d handled message(s) stay in the queue (they come back as repeats): %s", len(done), e)

    def _count(self, what: str) -> None:
        with self._lock:
            setattr(self.tally, what, getattr(self.tally, what) + 1)

    def _handle(self, feed: Feed, message: Message) -> tuple[bool, str]:
        """Whether the message is handled (to be deleted), and why to set it aside ("" if not)."""
        if message.receives > self.max_receives:
            self.tally.set_aside += 1
            return False, f"received {message.receives} times without being handled"
        now = self.clock()
        sender = ""
        try:
            if feed.hosts is None:
                notices = notices_of(message.body, message.id, self.rebalance)
            else:
                host = read_host(message.body, message.sender)
                notices = (host.notice(feed.hosts, now, message.id),)
                sender = f", sent by {host.sender or 'no Sender'} for pool {host.pool or '?'}"
        except Unreadable as e:
            self.tally.set_aside += 1
            return False, f"not {'an interruption event' if feed.hosts is None else 'a host'}: {e}"
        if not notices:
            self.tally.ignored += 1
            log.info(
                "message %s: nothing to act on (a rebalance recommendation is %s)", message.id, self.rebalance.value
            )
            return True, ""
        by_pool: dict[PoolIdentity, list[Notice]] = {}
        for notice in notices:
            pool = self.owner(notice.instance_id, now)
            if pool is None:
                self.tally.unknown += 1
                log.warning(
                    "%s for %s: no pool of cluster %s has that instance: message deleted",
                    notice.reason.value, notice.instance_id, self.cluster,
                )  # fmt: skip
                continue
            if feed.hosts is None and pool not in self.warned:
                self.tally.ignored += 1
                log.info("%s for %s ignored: %s sets draining.process_spot_warnings false",
                         notice.reason.value, notice.instance_id, pool)  # fmt: skip
                continue
            by_pool.setdefault(pool, []).append(notice)
        for pool, found in by_pool.items():
            try:
                new = Inbox(self.store, pool).file(found, now)
            except StateError as e:  # not deleted: it comes back, and after max_receives is set aside
                log.warning("%s: cannot file %s in its inbox: %s", pool, message.id, e)
                return False, ""
            self.tally.filed += len(new)
            self.tally.repeated += len(found) - len(new)
            self.tally.by_pool[str(pool)] = self.tally.by_pool.get(str(pool), 0) + len(new)
            for notice in new:
                log.info("%s: %s for %s filed (%s, message %s%s)",
                         pool, notice.reason.value, notice.instance_id, feed.name, message.id, sender)  # fmt: skip
        return True, ""


def serve(router: Router, lease: PoolLease | None, stop: threading.Event, once: bool = False) -> Tally:
    """Read every queue until ``stop`` (or one receive from each, with ``once``), each in its own
    thread, while this drainer holds the cluster's lease (claimed here, never blocked by SQS)."""
    holding = threading.Event()
    readers = [
        threading.Thread(target=router.read, args=(feed, holding, stop, once), name=f"drainer {feed.name}", daemon=True)
        for feed in router.feeds
    ]
    started = False
    while not stop.is_set():
        held = True
        if lease is not None:
            try:
                held = lease.claim(router.clock()).held
            except StateError as e:
                log.warning("the drainer's lease cannot be read: %s", e)
                held = False
        if held:
            holding.set()
        else:
            holding.clear()
        if held and not started:
            for reader in readers:
                reader.start()
            started = True
        if once:
            break
        stop.wait(LEASE_SECONDS / 6)
    if once and started:
        for reader in readers:
            reader.join()
    holding.clear()
    if lease is not None and lease.last is not None and lease.last.held:
        try:
            lease.release()
        except StateError:
            pass
    return router.tally


HOSTS = {"drain_queue_url": HostQueue.DRAIN, "termination_queue_url": HostQueue.TERMINATION}  # else: events


def build(main: MainConfig, cluster: str, directory: str, wait_seconds: int) -> tuple[Router, PoolLease]:
    config = cluster_config(main, cluster)
    notices = main.notices
    settings = AwsSettings.from_config(main.aws, config.aws_region)
    feeds = [
        Feed(
            NoticeQueue(
                settings,
                getattr(config, key),
                wait_seconds=wait_seconds,
                visibility_seconds=notices.visibility_timeout_seconds,
                dead_letter_url=notices.dead_letter_queue_url,
            ),
            HOSTS.get(key),
        )
        for key in config.QUEUE_KEYS
        if getattr(config, key)
    ]
    if not feeds:
        keys = ", ".join(reversed(config.QUEUE_KEYS))
        raise UserError(f"clusters.{cluster}: none of {keys} is set: there is no queue of notices to read")
    store = open_state_store(main)
    holder = Holder.this_process(time.time())
    lease = PoolLease(store, PoolIdentity(cluster, DRAINER, Scheduler.KUBERNETES), holder, LEASE_SECONDS, "drainer")
    return Router(main, cluster, directory, store, feeds), lease


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clusterman.batch.drainer", description=__doc__.split("\n")[0])
    add_program_arguments(parser)
    parser.add_argument(
        "--cluster",
        default=os.environ.get("CMAN_CLUSTER"),
        required="CMAN_CLUSTER" not in os.environ,
        help="the cluster whose queues are read (default: $CMAN_CLUSTER)",
    )
    parser.add_argument("--wait-seconds", type=int, default=20, help="SQS long poll (0 to 20)")
    parser.add_argument("--once", action="store_true", help="one receive, then exit")
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    stop = stop_on_signals(log, "stopping the drainer")
    try:
        main_config = load_main(args)
        router, lease = build(main_config, args.cluster, cluster_config_directory(args, main_config), args.wait_seconds)
    except (UserError, Reported) as e:
        log.error("%s", e)
        return 1
    queues = ", ".join(f"{feed.name} {feed.queue.url}" for feed in router.feeds)
    log.info("reading %s for every pool of cluster %s", queues, args.cluster)
    tally = serve(router, lease, stop, args.once)
    log.info("stopped: %s", tally)
    return 0


if __name__ == "__main__":
    sys.exit(main())
