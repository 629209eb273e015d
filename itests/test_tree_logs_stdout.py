"""``--log-stdout`` ($CMAN_LOG_STDOUT=1, as the manifests set it): the real tree's every line on the
bootstrap's output, each prefixed with its program, so ``kubectl logs`` shows every decision; the
programs' log files stay as they were."""

from __future__ import annotations

import re

import pytest

from clusterman.local.stack import is_decision_line
from itests.test_tree_with_autoscaler import Tree
from itests.test_tree_with_autoscaler import wait_for

PREFIX = re.compile(r"^(bootstrap|supervisord|autoscaler|runner-\d+|fetch-\d+) \| ")


@pytest.mark.timeout(240)
def test_every_program_s_lines_reach_stdout_prefixed_with_its_name(tmp_path, moto_server):
    tree = Tree(tmp_path, moto_server.url, ("--log-stdout",))
    try:
        wait_for(lambda: [line for line in output(tree) if line.startswith("autoscaler | ") and is_decision_line(
            line.removeprefix("autoscaler | "))], 90, "a decision on the bootstrap's output")  # fmt: skip
    finally:
        tree.stop()
    lines = output(tree)
    assert [line for line in lines if not PREFIX.match(line)] == []
    programs = {PREFIX.match(line)[1] for line in lines}
    assert {"bootstrap", "supervisord", "autoscaler", "runner-0", "fetch-0"} <= programs, programs
    # The files are kept, and the autoscaler's reached the output whole, in order, up to the stop.
    copied = [line.removeprefix("autoscaler | ") for line in lines if line.startswith("autoscaler | ")]
    assert copied == tree.autoscaler_log.read_text().splitlines()
    assert any("spawned: 'autoscaler'" in line for line in lines if line.startswith("supervisord | "))


def output(tree: Tree) -> list[str]:
    return tree.log.read_text(errors="replace").splitlines()
