"""``clusterman plan --snapshot FILE``: what would the autoscaler do now, and why?

Reads one JSON document (docs/scaling.md, "clusterman plan") and prints the decision as JSON.
A bad document is one line on stderr naming the field, and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from clusterman.cli.plan_input import PlanInputError
from clusterman.cli.plan_input import load_plan
from clusterman.decision.decide import decide


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("plan", help="print the scaling decision for a pool snapshot, and why")
    parser.add_argument("--snapshot", required=True, type=Path, help="the JSON document (- for stdin)")
    parser.set_defaults(func=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    source = "stdin" if str(args.snapshot) == "-" else str(args.snapshot)
    try:
        text = sys.stdin.read() if source == "stdin" else args.snapshot.read_text()
    except OSError as e:
        raise PlanInputError(source, "", f"cannot read: {e.strerror}") from e
    plan = load_plan(text, source, default_now=time.time())
    decision = decide(plan.snapshot, plan.requests, plan.policy, plan.state, plan.now)
    print(json.dumps(decision.as_json(), indent=2, ensure_ascii=False))
    return 0
