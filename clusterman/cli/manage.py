"""``clusterman manage --target-capacity N|min|max``: set a pool's target by hand.

Limited exactly as the autoscaler limits its own decisions (``clusterman.run.manual``) and
spread over the pool's resource groups. Asks before changing anything unless ``--yes``; ``--dry-run``
prints what would change.

The change is made under the pool's lease (``clusterman.state.lease``), so it never interleaves
with an autoscaler run: the running autoscaler is asked to hand the lease over after its current
run, and the command waits up to ``--wait`` for it, else changes nothing and says who holds the
lease until when. ``--pause DURATION`` then pauses the autoscaler (the state of ``clusterman
disable``) before the lease is given back, so the target stays; without it, the command says that
the autoscaler's next run recomputes the target from demand.
"""

from __future__ import annotations

import argparse
import getpass
import socket
import sys
import threading
import time
from collections.abc import Callable

from clusterman.batch.arguments import add_pool_arguments
from clusterman.batch.arguments import add_timeout_argument
from clusterman.batch.arguments import resolve_pool
from clusterman.core.config import PoolIdentity
from clusterman.core.durations import parse_duration
from clusterman.core.timestamps import format_time
from clusterman.decision.exact import show
from clusterman.errors import reading_input
from clusterman.run.manual import ManualTarget
from clusterman.run.manual import ManualTargetError
from clusterman.run.manual import parse_target
from clusterman.run.manual import set_pool_target
from clusterman.state.lease import Holder
from clusterman.state.lease import PoolLease
from clusterman.state.lease import take_on_request
from clusterman.state.pause import parse_until
from clusterman.state.pause import pause
from clusterman.state.pause import pause_status
from clusterman.state.store import NO_EXPIRY
from clusterman.state.store import StateError
from clusterman.state.store import StateStore
from clusterman.wiring.build import discovery_for
from clusterman.wiring.state_store import open_state_store

# manage's lease lives this long and is renewed every third of it while the change is made: a
# manage killed (kill -9) or stopped blocks the autoscaler this long at most, however long the change takes
LEASE_SECONDS = 10.0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("manage", help="set a pool's target capacity by hand (limited as the autoscaler)")
    add_pool_arguments(parser)
    parser.add_argument("--target-capacity", required=True, metavar="N|min|max", help="weight units, min or max")
    parser.add_argument("--dry-run", action="store_true", help="print what would change, change nothing")
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument(
        "--pause",
        metavar="DURATION",
        default=None,
        help="then pause the autoscaler (as `clusterman disable --until`): 30m, 2h, an ISO time or never; "
        "without it the autoscaler's next run recomputes the target",
    )
    parser.add_argument(
        "--wait",
        metavar="DURATION",
        default="60s",
        help="how long to wait for the running autoscaler to finish its run and hand the pool's lease over "
        "(default 60s; 0 = refuse at once if it is held)",
    )
    add_timeout_argument(parser, 30.0, "seconds each call to the cloud or the state store may take, retries included")
    parser.set_defaults(func=run_manage)


def run_manage(args: argparse.Namespace) -> int:
    setup = resolve_pool(args)
    policy = setup.policy
    with reading_input():  # every argument is checked before the cloud is asked anything
        requested = parse_target(args.target_capacity, policy)
        wait = _wait_seconds(args.wait)
        pause_until = parse_until(args.pause, time.time(), "--pause") if args.pause is not None else None
    found = discovery_for(setup, budget_seconds=args.timeout)()
    if found.errors:
        problems = "; ".join(str(e) for e in found.errors)
        raise ManualTargetError(f"cannot find every resource group, nothing changed: {problems}")
    for warning in found.mistagged:
        print(f"clusterman manage: not counted: {warning}", file=sys.stderr)
    now = time.time()  # after the cloud's answers: the lease and its request count from here
    question = f"Set the target capacity of {setup.identity} to {show(requested)}? [y/N] "
    if not (args.dry_run or args.yes):
        answer = _confirmed(question)
        if answer is None:  # no terminal (cron, CI, a pipe that closed): nobody to answer
            raise ManualTargetError(
                "nothing changed: nobody answered [y/N] (no terminal): give --yes (-y) to change it, "
                "or --dry-run to see what it would do"
            )
        if not answer:
            print("nothing changed")
            return 1
    if args.dry_run:
        result = set_pool_target(found.groups, requested, policy, now, True)
        for line in report_lines(str(setup.identity), result):
            print(line)
        if pause_until is not None:
            print(f"would pause the autoscaler {_until_text(pause_until)}")
        return 1 if result.errors else 0

    operator = f"{getpass.getuser()}@{socket.gethostname()}"
    store = open_state_store(setup.main, args.timeout)
    lease = PoolLease(
        store, setup.identity, Holder.this_process(now), LEASE_SECONDS, purpose=f"clusterman manage by {operator}"
    )
    asked = time.monotonic()
    status = take_on_request(lease, wait)
    if not status.held:
        waited = f"within --wait {args.wait}" if wait > 0 else "at once (--wait 0)"
        raise ManualTargetError(
            f"nothing changed: the pool's lease {status.describe()}, and it was not handed over {waited}; "
            "try again, or give a longer --wait"
        )
    renewing, lapses = _keep_renewed(lease)
    try:
        print(f"{setup.identity}: took the pool's lease after {time.monotonic() - asked:.1f} s")
        why = lapses[0] if lapses else still_ours(lease)
        if why:
            raise ManualTargetError(f"nothing changed: {why}; try again")
        now = time.time()
        result = set_pool_target(found.groups, requested, policy, now, False)
        for line in report_lines(str(setup.identity), result):
            print(line)
        for group_id, problem in result.errors:
            print(f"clusterman manage: {group_id}: {problem}", file=sys.stderr)
        if result.changes:
            print(f"changed by {operator}")
            _after_change(store, setup.identity, now, pause_until, f"target {show(result.achieved)} set by {operator}")
    finally:
        renewing()  # stopped before the release: a renewal after it would take the lease back
        lease.release()
    return 1 if result.errors else 0


def still_ours(lease: PoolLease, clock: Callable[[], float] = time.time) -> str:
    """Renew the held lease: "" while it is ours, else why not. A lease that ran out before this
    answer (the process stopped, a Ctrl-Z, a slow store) was not ours all along: the autoscaler
    may have taken it back and acted meanwhile, even if it is ours again now."""
    last = lease.last
    try:
        status = lease.claim(clock())
    except StateError as e:
        if lease.held_at(clock()):  # not renewed, but still ours until it runs out
            print(f"clusterman manage: cannot renew the pool's lease: {e}", file=sys.stderr)
            return ""
        return f"cannot renew the pool's lease, and it ran out: {e}"
    if not status.held:
        return f"lost the pool's lease: it {status.describe()}"
    if last is not None and not last.covers(clock()):
        ran_out = format_time(last.expires_at)
        return f"the pool's lease ran out at {ran_out} before the change (was this process stopped?)"
    return ""


def _keep_renewed(lease: PoolLease, clock: Callable[[], float] = time.time) -> tuple[Callable[[], None], list[str]]:
    """Renew the held lease every third of its TTL until the returned function is called (it
    waits for the thread); the list gathers why it stopped being ours."""
    done = threading.Event()
    lapses: list[str] = []

    def renew() -> None:
        while not done.wait(lease.ttl_seconds / 3):
            why = still_ours(lease, clock)
            if why:
                lapses.append(why)
                print(f"clusterman manage: {why}", file=sys.stderr)

    thread = threading.Thread(target=renew, name="lease-renewal", daemon=True)
    thread.start()

    def stop() -> None:
        done.set()
        thread.join()

    return stop, lapses


def _after_change(store: StateStore, identity: PoolIdentity, now: float, until: int | None, reason: str) -> None:
    """Pause the autoscaler (before the lease is given back), or say that its next run recomputes."""
    current = pause_status(store, identity, now)
    if until is not None:
        if current.paused and (current.until == NO_EXPIRY or (until != NO_EXPIRY and current.until >= until)):
            print(f"the autoscaler stays {current.describe()}")  # a longer pause is not shortened
            return
        pause(store, identity, now, until, reason)
        print(f"the autoscaler is paused {_until_text(until)}: `clusterman enable` resumes it earlier")
    elif current.paused:
        print(f"the autoscaler is {current.describe()}: it keeps this target until then")
    else:
        print(
            "note: the autoscaler is not paused: its next run recomputes the target from demand; "
            "give --pause DURATION (or `clusterman disable`) to keep this one"
        )


def _until_text(until: int) -> str:
    return "until enabled" if until == NO_EXPIRY else f"until {format_time(until)}"


def _wait_seconds(text: str) -> float:
    if text.strip() == "0":
        return 0.0
    try:
        return float(parse_duration(text))
    except ValueError as e:
        raise ValueError(f"--wait {text!r}: {e}") from None


def report_lines(pool: str, r: ManualTarget) -> list[str]:
    verb = "would set" if r.dry_run else "set"
    limited = f" (asked {show(r.requested)}; limited by {', '.join(r.notes)})" if r.notes else ""
    lines = [f"{pool}: {verb} target capacity {show(r.current)} -> {show(r.achieved)}{limited}"]
    for c in r.changes:
        note = f" ({c.note})" if c.note else ""
        lines.append(f"  {c.group_id}: {c.previous:g} -> {c.target:g}{note}")
    if r.achieved < r.current:
        lines.append("  lowering a target terminates nothing: the autoscaler's next run chooses the nodes that leave")
    return lines


def _confirmed(question: str) -> bool | None:
    """The answer, or None when there is none to read (stdin closed or empty)."""
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        if not sys.stdin.isatty():
            print(file=sys.stderr)  # the question's line ends: the error reads as a line of its own
        return None
