"""Loading a signal and turning its answers into protocol replies, for every way a signal is served.

The runner program (``clusterman_signals.run``) and the simulator's in-process signals
(``clusterman.signals.in_process``) both use this, so a signal that answers badly fails the same
way whether it is called over a socket or in the autoscaler's own process. Standard library only.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
import time
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

from clusterman_signals.base_signal import BaseSignal
from clusterman_signals.wire import RESOURCE_NAMES
from clusterman_signals.wire import read_init


class SignalFailure(Exception):
    """The signal could not answer; the message goes back to the client as ``{"Error": ...}``."""


def _a_signal(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseSignal) and value is not BaseSignal


def namespaces() -> list[str]:
    """The signal namespaces here: the subpackages of ``clusterman_signals`` (on every path it spans)."""
    import clusterman_signals

    return sorted({m.name for m in pkgutil.iter_modules(clusterman_signals.__path__) if m.ispkg})


def load_signal_class(namespace: str, name: str) -> type[BaseSignal]:
    """The signal's class; SignalFailure in one line, with no traceback, for a namespace or a name
    that is not there (a typo: what is there is listed), and with the namespace's own traceback
    for a namespace that fails as it imports."""
    module_name = f"clusterman_signals.{namespace}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:  # something the namespace imports is missing: its traceback says where
            raise SignalFailure(f"cannot import namespace {module_name}: {type(e).__name__}: {e}") from e
        known = ", ".join(namespaces()) or "none"
        raise SignalFailure(f"no namespace {module_name} (namespaces here: {known})") from None
    except Exception as e:
        raise SignalFailure(f"cannot import namespace {module_name}: {type(e).__name__}: {e}") from e
    cls = getattr(module, name, None)
    if cls is None:
        signals = sorted(n for n, v in vars(module).items() if _a_signal(v))
        raise SignalFailure(f"{module_name} has no signal named {name} (signals there: {', '.join(signals) or 'none'})")
    if not (isinstance(cls, type) and issubclass(cls, BaseSignal)):
        raise SignalFailure(f"clusterman_signals.{namespace}.{name} is not a BaseSignal subclass")
    return cls


def build_signal(cls: type[BaseSignal], init: Any) -> BaseSignal:
    try:
        cluster, pool, parameters = read_init(init)
    except ValueError as e:
        raise SignalFailure(str(e)) from e
    try:
        return cls(cluster, pool, parameters)
    except Exception as e:
        raise SignalFailure(f"{cls.__name__}(...) raised {type(e).__name__}: {e}") from e


def resources_to_json(result: Any) -> dict[str, float | None]:
    """Check what ``value()`` returned: a ``SignalResources`` of finite numbers >= 0 or None.

    The documented type, as Clusterman's runner requires it (it calls ``_asdict()``, so another
    named tuple with these fields passes too). A plain dict is refused with a message saying what
    to return instead: accepting it here would make a signal that fails on Clusterman's runners.
    """
    if not (isinstance(result, tuple) and hasattr(result, "_asdict")):
        hint = "; wrap it: SignalResources(**d)" if isinstance(result, Mapping) else ""
        raise SignalFailure(f"value() returned {type(result).__name__}, expected SignalResources{hint}")
    values = dict(result._asdict())
    unknown = set(values) - set(RESOURCE_NAMES)
    if unknown:
        raise SignalFailure(f"value() returned unknown resource(s): {', '.join(sorted(unknown))}")
    out: dict[str, float | None] = {}
    for name in RESOURCE_NAMES:
        v = values.get(name)
        if v is None:
            out[name] = None
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise SignalFailure(f"value() returned {name}={v!r}; expected a finite number >= 0 or None")
        out[name] = float(v)
    return out


def answer(
    signal: BaseSignal | SignalFailure,
    metrics: Mapping[str, Any],
    timestamp: float,
    raised: Callable[[BaseException], None] | None = None,
) -> dict[str, Any]:
    """The protocol reply for one evaluation: ``{"Resources": ...}`` or ``{"Error": ...}``.

    ``raised`` is given the exception behind an error that has a traceback worth showing: what
    ``value()`` raised, or what made the signal fail to import or construct."""
    if isinstance(signal, SignalFailure):
        if raised is not None and signal.__cause__ is not None:
            raised(signal.__cause__)
        return {"Error": str(signal)}
    try:
        return {"Resources": resources_to_json(signal.evaluate(metrics, timestamp))}
    except SignalFailure as e:
        return {"Error": str(e)}
    except Exception as e:  # the signal's failure, not the runner's: answered, and the runner serves on
        if raised is not None:
            raised(e)
        return {"Error": f"value() raised {type(e).__name__}: {e}"}


def parse_payload(payload: Any) -> tuple[dict[str, Any], float]:
    """The metrics mapping and timestamp of one evaluation (now, when the client sent none)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("metrics"), dict):
        raise ValueError('expected {"metrics": {...}, "timestamp": T}')
    timestamp = payload.get("timestamp", time.time())
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)):
        raise ValueError(f"timestamp must be a number, got {timestamp!r}")
    return payload["metrics"], timestamp
