"""A small catalog of EC2 instance types: hardware and on-demand price, for simulated groups.

Real groups learn their instances' hardware from EC2 (``ec2_instances.InstanceTypeCatalog``); a
simulated group has no EC2 to ask, so it takes the size and price of its instance types from
here, unless the pool file gives them (``simulation.markets[].resources`` and ``price``). Prices
are Linux on-demand, us-east-1, in dollars per instance-hour; memory is the type's GiB in MB
(``resources.py``: MB are 10**6 bytes); disk is one EBS volume of ``DEFAULT_DISK_MB``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from clusterman.core.resources import Resources

MB_PER_GIB: Final = 2**30 / 10**6
DEFAULT_DISK_MB: Final = 20_000.0


@dataclass(frozen=True)
class InstanceType:
    name: str
    resources: Resources  # the whole instance (cpus in cores, mem and disk in MB)
    on_demand_price: float  # dollars per instance-hour


def _t(name: str, vcpus: int, mem_gib: float, price: float, gpus: int = 0) -> InstanceType:
    return InstanceType(name, Resources(vcpus, mem_gib * MB_PER_GIB, DEFAULT_DISK_MB, gpus), price)


CATALOG: Final[dict[str, InstanceType]] = {
    t.name: t
    for t in (
        _t("m3.medium", 1, 3.75, 0.067),
        _t("m3.large", 2, 7.5, 0.133),
        _t("m3.xlarge", 4, 15, 0.266),
        _t("m3.2xlarge", 8, 30, 0.532),
        _t("m4.large", 2, 8, 0.10),
        _t("m4.xlarge", 4, 16, 0.20),
        _t("m4.2xlarge", 8, 32, 0.40),
        _t("m4.4xlarge", 16, 64, 0.80),
        _t("m5.large", 2, 8, 0.096),
        _t("m5.xlarge", 4, 16, 0.192),
        _t("m5.2xlarge", 8, 32, 0.384),
        _t("m5.4xlarge", 16, 64, 0.768),
        _t("m5.8xlarge", 32, 128, 1.536),
        _t("m5.12xlarge", 48, 192, 2.304),
        _t("m6i.large", 2, 8, 0.096),
        _t("m6i.xlarge", 4, 16, 0.192),
        _t("m6i.2xlarge", 8, 32, 0.384),
        _t("m6i.4xlarge", 16, 64, 0.768),
        _t("c5.large", 2, 4, 0.085),
        _t("c5.xlarge", 4, 8, 0.17),
        _t("c5.2xlarge", 8, 16, 0.34),
        _t("c5.4xlarge", 16, 32, 0.68),
        _t("c5.9xlarge", 36, 72, 1.53),
        _t("r5.large", 2, 16, 0.126),
        _t("r5.xlarge", 4, 32, 0.252),
        _t("r5.2xlarge", 8, 64, 0.504),
        _t("r5.4xlarge", 16, 128, 1.008),
        _t("g4dn.xlarge", 4, 16, 0.526, gpus=1),
        _t("p3.2xlarge", 8, 61, 3.06, gpus=1),
    )
}


def known_instance_type(name: str) -> InstanceType | None:
    return CATALOG.get(name)
