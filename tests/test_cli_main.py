"""The command line's structure: lazy subcommands, ``python -m clusterman``, user errors vs bugs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import clusterman.cli.plan
from clusterman.cli import main as cli
from tests.test_plan_cli import SEED

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("kubernetes", "boto3", "clusterman.cli.status", "clusterman.cli.simulate", "clusterman.cli.signal")


def imported_after(argv: list[str]) -> set[str]:
    """The modules a fresh interpreter has loaded after ``clusterman <argv>``."""
    code = (
        "import json, sys\n"
        "from clusterman.cli.main import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=REPO, timeout=120, check=True
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_the_table_lists_what_every_module_registers():
    assert cli.unlisted_modules() == []
    parser = cli.build_parser()  # every module loaded
    subparsers = parser._subparsers._group_actions[0]
    helps = {a.dest: a.help for a in subparsers._choices_actions}
    for command in cli.COMMANDS:
        assert helps[command.name] == command.help
        for alias in command.aliases:
            assert subparsers.choices[alias] is subparsers.choices[command.name]
    listed = {c.name for c in cli.COMMANDS} | {a for c in cli.COMMANDS for a in c.aliases}
    assert set(subparsers.choices) == listed


def test_help_lists_every_command_and_imports_none(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert all(c.name in out and c.help.split()[0] in out for c in cli.COMMANDS)
    assert not {m for m in imported_after(["--help"]) if m.startswith(HEAVY)}


def test_a_command_imports_only_its_own_module():
    loaded = imported_after(["signal", "evaluate", "--help"])
    assert "clusterman.cli.signal" in loaded
    assert not {m for m in loaded if m.startswith(("kubernetes", "clusterman.cli.status", "clusterman.simulator"))}


def test_command_help_is_complete(capsys):
    with pytest.raises(SystemExit):
        cli.main(["signal", "evaluate", "--help"])
    assert "--namespace" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["enable", "--help"])  # the second command of a module that registers two
    assert "--scheduler" in capsys.readouterr().out


def test_python_dash_m_clusterman():
    done = subprocess.run(
        [sys.executable, "-m", "clusterman", "list-clusters", "--json"], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert "local-dev" in json.loads(done.stdout)


def test_a_bug_keeps_its_traceback(tmp_path, monkeypatch):
    """A ValueError from clusterman's own code is a bug: it propagates instead of one line, status 1."""

    def broken(*args, **kwargs):
        raise ValueError("a bug in the decision")

    monkeypatch.setattr(clusterman.cli.plan, "decide", broken)
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(SEED))
    with pytest.raises(ValueError, match="a bug in the decision"):
        cli.main(["plan", "--snapshot", str(path)])


def test_user_errors_stay_one_line(tmp_path, capsys):
    metrics = tmp_path / "m.json"
    metrics.write_text("[1, 2]")
    args = ["signal", "evaluate", "--namespace", "x", "--name", "Y", "--metrics", str(metrics)]
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(metrics) in err
    assert cli.main(["events", "--url", "http://127.0.0.1:1", "--type", "bogus"]) == 1
    assert "--type BOGUS: unknown event type" in capsys.readouterr().err
    config = str(REPO / "config" / "clusterman.yaml")
    args = ["--env-config-path", config, "manage", "--cluster", "local-dev", "--pool", "default"]
    assert cli.main([*args, "--target-capacity", "lots", "--dry-run"]) == 1
    assert "--target-capacity 'lots'" in capsys.readouterr().err
    # the pause is read before the cloud is asked, and its error names the flag (it said --until)
    assert cli.main([*args, "--target-capacity", "3", "--pause", "1y", "--dry-run"]) == 1
    assert capsys.readouterr().err == (
        "clusterman manage: --pause '1y': expected a duration such as 30m, 2h, 1d 12h, or an ISO time\n"
    )
