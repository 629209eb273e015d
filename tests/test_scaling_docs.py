"""Every worked example in docs/scaling.md, run through `clusterman plan`: the docs stay true."""

import json
import re
from pathlib import Path

import pytest

from clusterman.cli.main import main

DOC = Path(__file__).resolve().parents[1] / "docs" / "scaling.md"
EXAMPLE = re.compile(r"```json\n(.*?)\n```\s*\nExplanation:\s*\n\s*```\n(.*?)\n```", re.DOTALL)
EXAMPLES = EXAMPLE.findall(DOC.read_text())


def test_the_doc_has_its_examples():
    assert len(EXAMPLES) == 7


@pytest.mark.parametrize(("document", "explanation"), EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_worked_example(tmp_path, capsys, document, explanation):
    path = tmp_path / "example.json"
    path.write_text(document)
    assert main(["plan", "--snapshot", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["explanation"] == explanation
