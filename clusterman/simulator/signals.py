"""The pool's signals for a simulation: in this process, or in the real runner processes.

Either way the run asks them through ``manager.demand.SignalDemand`` and ``SignalEvaluator``,
exactly as the autoscaler does, reading their ``required_metrics`` from the simulation's own
metrics store. Only how each signal is reached differs:
  in-process  ``signals.in_process.InProcessSignal``: the signal class imported from this
              environment's ``clusterman_signals`` (fast; the default)
  process     one ``python -m clusterman_signals.run`` per signal and a ``SignalClient`` over its
              socket (the full protocol, as deployed). Socket names carry a tag of this run, so
              simulations never talk to a deployed runner or to each other.
A signal that cannot be loaded at all is an error before the run starts, rather than a run
quietly scaled on the default signal instead.
"""

from __future__ import annotations

import enum
import os
import subprocess
import sys
import uuid

from clusterman.core.config import MetricType
from clusterman.core.config import PoolIdentity
from clusterman.datastore.store import MetricsStore
from clusterman.run.demand_source import SignalDemand
from clusterman.signals.client import SignalAddress
from clusterman.signals.client import SignalClient
from clusterman.signals.evaluator import Signal
from clusterman.signals.evaluator import SignalEvaluator
from clusterman.signals.in_process import InProcessSignal
from clusterman.signals.specs import SignalSpec
from clusterman.signals.specs import app_signal_specs
from clusterman.signals.specs import default_signal_spec
from clusterman.wiring.setup import PoolSetup


class SignalMode(enum.Enum):
    IN_PROCESS = "in-process"
    PROCESS = "process"


class RunnerProcesses:
    """Real runner processes, one per signal, started on first use and stopped by ``close``."""

    def __init__(self, identity: PoolIdentity) -> None:
        self.identity = identity
        self.tag = uuid.uuid4().hex[:12]
        self.processes: list[subprocess.Popen[bytes]] = []

    def client(self, spec: SignalSpec) -> SignalClient:
        address = SignalAddress(spec.namespace, spec.name, f"{spec.app}.simulation-{self.tag}")
        command = [sys.executable, "-m", "clusterman_signals.run", address.namespace, address.name, address.app]
        self.processes.append(subprocess.Popen([*command, "--log-level", "WARNING"]))
        return SignalClient(
            address, self.identity.cluster, self.identity.pool, spec.config.parameters, allowed_uids={os.getuid()}
        )

    def close(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()


def signal_demand(
    setup: PoolSetup, store: MetricsStore, mode: SignalMode
) -> tuple[SignalDemand, RunnerProcesses | None]:
    """The pool's SignalDemand, and the runner processes to stop after the run (process mode)."""
    specs = [default_signal_spec(setup.main), *app_signal_specs(setup.pool, setup.identity)]
    for spec in specs:  # fail now, naming the signal, rather than fall back for the whole run
        in_process(setup.identity, spec).load()
    runners = RunnerProcesses(setup.identity) if mode is SignalMode.PROCESS else None

    def factory(spec: SignalSpec) -> Signal:
        return runners.client(spec) if runners is not None else in_process(setup.identity, spec)

    evaluator = SignalEvaluator(setup.identity, specs[0], specs[1:], factory)
    return SignalDemand(evaluator, store, setup.policy), runners


def collected_names(setup: PoolSetup) -> frozenset[str] | None:
    """The pool metrics its signals read (so the simulation writes no others); None: any may be
    read (a regex names them)."""
    names = set()
    for spec in [default_signal_spec(setup.main), *app_signal_specs(setup.pool, setup.identity)]:
        for metric in spec.config.required_metrics:
            if metric.type is MetricType.APP_METRICS:
                continue
            if metric.regex:
                return None
            names.add(metric.name)
    return frozenset(names)


def in_process(identity: PoolIdentity, spec: SignalSpec) -> InProcessSignal:
    return InProcessSignal(spec.address, identity.cluster, identity.pool, spec.config.parameters)
