import shutil
from pathlib import Path

from clusterman.cli.main import main

REPO = Path(__file__).resolve().parents[1]


def copy_config(tmp_path):
    shutil.copytree(REPO / "config", tmp_path / "config")
    return str(tmp_path / "config" / "clusterman.yaml")


def test_disable_enable_round_trip(tmp_path, capsys):
    cfg = copy_config(tmp_path)
    pool = ["--cluster", "local-dev", "--pool", "default"]
    assert main(["--env-config-path", cfg, "disable", *pool, "--until", "1h", "--reason", "upgrade"]) == 0
    assert "paused until" in capsys.readouterr().out
    assert (tmp_path / "state" / "state.sqlite").exists()  # state_directory is relative to the main file
    assert main(["--env-config-path", cfg, "enable", *pool]) == 0
    assert "enabled" in capsys.readouterr().out


def test_unknown_pool_and_bad_until_are_one_line_errors(tmp_path, capsys):
    cfg = copy_config(tmp_path)
    assert main(["--env-config-path", cfg, "disable", "--cluster", "local-dev", "--pool", "nope"]) == 1
    assert "no pool file for pool nope" in capsys.readouterr().err
    args = ["--env-config-path", cfg, "disable", "--cluster", "local-dev", "--pool", "default", "--until", "later"]
    assert main(args) == 1
    assert "--until 'later'" in capsys.readouterr().err
