"""``clusterman disable`` / ``clusterman enable``: pause a pool's autoscaler, with an expiry."""

from __future__ import annotations

import argparse
import time

from clusterman.batch.arguments import add_pool_arguments
from clusterman.batch.arguments import add_timeout_argument
from clusterman.batch.arguments import resolve_identity
from clusterman.errors import reading_input
from clusterman.state.pause import parse_until
from clusterman.state.pause import pause
from clusterman.state.pause import pause_status
from clusterman.state.pause import resume
from clusterman.wiring.state_store import open_state_store


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    disable = subparsers.add_parser("disable", help="pause a pool's autoscaler")
    add_pool_arguments(disable)
    disable.add_argument("--until", default="never", help="30m, 2h, 1d, an ISO time, or never (default)")
    disable.add_argument("--reason", default="", help="shown by `clusterman status`")
    disable.set_defaults(func=run_disable)
    enable = subparsers.add_parser("enable", help="resume a paused pool's autoscaler")
    add_pool_arguments(enable)
    enable.set_defaults(func=run_enable)
    for parser in (disable, enable):
        add_timeout_argument(parser, 15.0, "seconds each call to the state store may take, retries included")


def run_disable(args: argparse.Namespace) -> int:
    ctx = resolve_identity(args)
    now = time.time()
    store = open_state_store(ctx.main, args.timeout)
    with reading_input():
        until = parse_until(args.until, now)
    pause(store, ctx.identity, now, until, args.reason)
    print(f"{ctx.identity}: {pause_status(store, ctx.identity, now).describe()}")
    return 0


def run_enable(args: argparse.Namespace) -> int:
    ctx = resolve_identity(args)
    store = open_state_store(ctx.main, args.timeout)
    resume(store, ctx.identity)
    print(f"{ctx.identity}: {pause_status(store, ctx.identity, time.time()).describe()}")
    return 0
