import math

import pytest

from clusterman.core.resources import NO_OPINION
from clusterman.core.resources import ResourceRequest
from clusterman.core.resources import Resources


def test_resources_arithmetic():
    a = Resources(cpus=2, mem=100)
    b = Resources(cpus=1, mem=50, gpus=1)
    assert a + b == Resources(3, 150, 0, 1)
    assert a - b == Resources(1, 50, 0, -1)
    assert (a - b).clip_negative() == Resources(1, 50, 0, 0)
    assert Resources.total([a, b, b]) == Resources(4, 200, 0, 2)
    assert a["mem"] == 100
    with pytest.raises(KeyError):
        a["ram"]
    with pytest.raises(ValueError, match="unknown resource"):
        Resources.from_mapping({"ram": 1})


def test_request_sum_treats_no_opinion_as_identity():
    a = ResourceRequest(cpus=2)
    b = ResourceRequest(cpus=3, mem=10)
    total = ResourceRequest.total([a, b, ResourceRequest()])
    assert total == ResourceRequest(cpus=5, mem=10)
    assert total.disk is NO_OPINION
    assert not ResourceRequest().has_opinion()
    assert ResourceRequest(cpus=0, mem=0).is_all_zero()
    assert not ResourceRequest().is_all_zero()
    assert ResourceRequest(cpus=1).as_json() == {"cpus": 1.0, "mem": None, "disk": None, "gpus": None}


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "3", True])
def test_request_rejects_bad_amounts(bad):
    with pytest.raises(ValueError, match="cpus"):
        ResourceRequest(cpus=bad)
