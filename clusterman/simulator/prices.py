"""What an instance costs per hour at a given time: its market's price, or the spot price series.

A market's ``price`` (``cloud.simulated_group.SimulatedMarket``) is its on-demand price (the catalog's
unless the pool file gives one). A spot market (``spot: true``, or any market of an ``sfr``
group) follows the metrics file's ``spot_prices|aws_availability_zone=<zone>,aws_instance_type=
<type>`` series where the file has one (any metric type; Clusterman files keep it in metadata):
the latest price at or before t, the first one before the series starts. Billing is per second
at the price in effect, as EC2 bills Linux instances (Clusterman's simulator bills whole hours at
the price of each hour's start).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from clusterman.cloud.simulated_group import SimulatedMarket
from clusterman.datastore.datafile import MetricsData
from clusterman.datastore.store import SPOT_PRICES
from clusterman.datastore.store import split_key

Market = tuple[str, str]  # (instance type, availability zone)


def spot_series(data: MetricsData) -> dict[Market, tuple[list[int], list[float]]]:
    """Every spot price series in the file, by (instance type, zone)."""
    found: dict[Market, tuple[list[int], list[float]]] = {}
    for by_key in data.values():
        for key, series in by_key.items():
            name, dims = split_key(key)
            if name != SPOT_PRICES or "aws_instance_type" not in dims or "aws_availability_zone" not in dims:
                continue
            prices = [v for _, v in series if isinstance(v, float)]
            if prices and len(prices) == len(series):
                found[(dims["aws_instance_type"], dims["aws_availability_zone"])] = ([t for t, _ in series], prices)
    return found


class PriceBook:
    def __init__(self, series: dict[Market, tuple[list[int], list[float]]]) -> None:
        self.series = series

    def price(self, market: SimulatedMarket, now: float) -> float:
        """Dollars per instance-hour at ``now``."""
        if market.spot:
            found = self.series.get((market.instance_type, market.availability_zone))
            if found is not None:
                times, prices = found
                return prices[max(bisect.bisect_right(times, now) - 1, 0)]
        return market.price

    def priced_by_series(self, markets: Iterable[SimulatedMarket]) -> list[Market]:
        """The spot markets whose price comes from the file (for the report)."""
        keys = {(m.instance_type, m.availability_zone) for m in markets if m.spot}
        return sorted(keys & self.series.keys())
