"""``clusterman manage --target-capacity N|min|max``: set a pool's target by hand.

Limited exactly as the autoscaler limits its own decisions (``clusterman.manager.manual``) and
spread over the pool's resource groups. Asks before changing anything unless ``--yes``; ``--dry-run``
prints what would change. The autoscaler sets its own target on its next run: pause it first
(``clusterman disable``) to keep a manual one.
"""

from __future__ import annotations

import argparse
import getpass
import socket
import sys
import time

from clusterman.decision.exact import show
from clusterman.errors import reading_input
from clusterman.manager.arguments import add_pool_arguments
from clusterman.manager.arguments import resolve_pool
from clusterman.manager.manual import ManualTarget
from clusterman.manager.manual import ManualTargetError
from clusterman.manager.manual import parse_target
from clusterman.manager.manual import set_pool_target
from clusterman.manager.wiring import discovery_for
from clusterman.state.factory import open_state_store
from clusterman.state.pause import pause_status


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("manage", help="set a pool's target capacity by hand (limited as the autoscaler)")
    add_pool_arguments(parser)
    parser.add_argument("--target-capacity", required=True, metavar="N|min|max", help="weight units, min or max")
    parser.add_argument("--dry-run", action="store_true", help="print what would change, change nothing")
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    parser.set_defaults(func=run_manage)


def run_manage(args: argparse.Namespace) -> int:
    setup = resolve_pool(args)
    policy = setup.policy
    with reading_input():
        requested = parse_target(args.target_capacity, policy)
    found = discovery_for(setup)()
    if found.errors:
        problems = "; ".join(str(e) for e in found.errors)
        raise ManualTargetError(f"cannot find every resource group, nothing changed: {problems}")
    for warning in found.mistagged:
        print(f"clusterman manage: not counted: {warning}", file=sys.stderr)
    now = time.time()
    question = f"Set the target capacity of {setup.identity} to {show(requested)}? [y/N] "
    if not (args.dry_run or args.yes or _confirmed(question)):
        print("nothing changed")
        return 1
    result = set_pool_target(found.groups, requested, policy, now, args.dry_run)
    for line in report_lines(str(setup.identity), result):
        print(line)
    for group_id, problem in result.errors:
        print(f"clusterman manage: {group_id}: {problem}", file=sys.stderr)
    if not args.dry_run and result.changes:
        print(f"changed by {getpass.getuser()}@{socket.gethostname()}")
        if not pause_status(open_state_store(setup.main), setup.identity, now).paused:
            print(
                "note: the autoscaler is not paused and sets its own target on its next run; "
                "`clusterman disable` first to keep this one"
            )
    return 1 if result.errors else 0


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


def _confirmed(question: str) -> bool:
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        return False
