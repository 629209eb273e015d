"""Spot prices from EC2's DescribeSpotPriceHistory, for the spot price collector.

EC2 answers with every price change in the period and, for each market, the price still in effect
at its start, stamped with the earlier time it took effect. Linux/UNIX (Amazon VPC) prices only,
as Clusterman collects.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC
from datetime import datetime
from typing import Any

log = logging.getLogger(__name__)

PRODUCT = "Linux/UNIX (Amazon VPC)"
PAGE_SIZE = 1000  # EC2's most per page


@dataclass(frozen=True)
class SpotPrice:
    instance_type: str
    availability_zone: str
    price: float  # dollars per instance-hour
    timestamp: float  # Unix seconds: when the price took effect

    @property
    def market(self) -> tuple[str, str]:
        return self.instance_type, self.availability_zone


def describe_spot_prices(ec2: Any, start: float, end: float) -> Iterator[SpotPrice]:
    """The prices of ``[start, end]`` (Unix seconds), page by page; an entry that is not a price
    (no type or zone, not a finite number >= 0) is logged and left out."""
    pages = ec2.get_paginator("describe_spot_price_history").paginate(
        StartTime=datetime.fromtimestamp(start, UTC),
        EndTime=datetime.fromtimestamp(end, UTC),
        ProductDescriptions=[PRODUCT],
        PaginationConfig={"PageSize": PAGE_SIZE},
    )
    for page in pages:
        for entry in page.get("SpotPriceHistory", []):
            found = _price(entry)
            if found is None:
                log.warning("not a spot price, left out: %r", entry)
            else:
                yield found


def _price(entry: dict[str, Any]) -> SpotPrice | None:
    try:
        price = float(entry["SpotPrice"])
        found = SpotPrice(
            str(entry["InstanceType"]), str(entry["AvailabilityZone"]), price, entry["Timestamp"].timestamp()
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not found.instance_type or not found.availability_zone or not math.isfinite(price) or price < 0:
        return None
    return found
