"""The options every program takes, declared once (``clusterman.batch.arguments``), with the names,
defaults and environment variables the deployments and supervisord.conf start them with."""

import argparse
import logging

import pytest

from clusterman.batch import autoscaler
from clusterman.batch import autoscaler_bootstrap
from clusterman.batch import metrics_collector
from clusterman.batch.arguments import add_program_arguments
from clusterman.batch.arguments import configure_logging
from clusterman.cli import main as cli
from clusterman.config.loader import default_env_config_path

# program -> (its parser, the default log level, whether it reads pool files from a directory, a minimal argv)
PROGRAMS = {
    "clusterman": (lambda: cli.build_parser(load=()), "WARNING", True, ["list-clusters"]),
    "autoscaler": (autoscaler.build_parser, "INFO", True, []),
    "autoscaler_bootstrap": (autoscaler_bootstrap.build_parser, "INFO", False, []),
    "metrics_collector": (metrics_collector.build_parser, "INFO", True, []),
}


def shared(argv, log_level_default="INFO", pool_files=True):
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_program_arguments(parser, log_level_default=log_level_default, pool_files=pool_files)
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], {}, {"env_config_path": "<default>", "log_level": "INFO", "cluster_config_directory": None}),
        ([], {"CMAN_ENV_CONFIG_PATH": "/srv/c.yaml"}, {"env_config_path": "/srv/c.yaml"}),
        (["--env-config-path", "/x.yaml"], {"CMAN_ENV_CONFIG_PATH": "/srv/c.yaml"}, {"env_config_path": "/x.yaml"}),
        (["--env-config-path", ""], {"CMAN_ENV_CONFIG_PATH": "/srv/c.yaml"}, {"env_config_path": "/srv/c.yaml"}),
        (["--log-level", "debug"], {}, {"log_level": "DEBUG"}),
        (["--log-level", "Error"], {}, {"log_level": "ERROR"}),
        (["--cluster-config-directory", "/pools"], {}, {"cluster_config_directory": "/pools"}),
    ],
)
def test_the_shared_options(monkeypatch, argv, env, expected):
    monkeypatch.delenv("CMAN_ENV_CONFIG_PATH", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = vars(shared(argv))
    for key, value in expected.items():
        assert args[key] == (default_env_config_path() if value == "<default>" else value), key


@pytest.mark.parametrize("argv", [["--log-level", "loud"], ["--log-level", "5"]])
def test_a_bad_log_level_is_a_usage_error(argv):
    with pytest.raises(argparse.ArgumentError, match="expected DEBUG, INFO, WARNING or ERROR"):
        shared(argv)


def test_without_pool_files_there_is_no_directory_option():
    parser = argparse.ArgumentParser()
    add_program_arguments(parser, pool_files=False)
    args, rest = parser.parse_known_args(["--cluster-config-directory", "/pools"])
    assert rest == ["--cluster-config-directory", "/pools"] and not hasattr(args, "cluster_config_directory")


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_program_takes_them_with_its_defaults(monkeypatch, program):
    build, level, pool_files, minimal = PROGRAMS[program]
    monkeypatch.setenv("CMAN_ENV_CONFIG_PATH", "/srv/clusterman.yaml")
    parser = build()
    text = parser.format_help()
    assert "--env-config-path ENV_CONFIG_PATH" in text and "$CMAN_ENV_CONFIG_PATH" in text
    assert "--log-level LOG_LEVEL" in text and f"(default: {level})" in text
    assert ("--cluster-config-directory" in text) == pool_files
    args, _ = parser.parse_known_args(minimal)
    assert args.env_config_path == "/srv/clusterman.yaml" and args.log_level == level
    given, _ = parser.parse_known_args(["--env-config-path", "/a.yaml", "--log-level", "debug", *minimal])
    assert given.env_config_path == "/a.yaml" and given.log_level == "DEBUG"


def test_one_logging_setup_stamps_in_utc(monkeypatch, capsys):
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)
    configure_logging("INFO")
    logging.getLogger("clusterman.test").info("hello")
    err = capsys.readouterr().err
    assert err.endswith("Z clusterman.test INFO hello\n") and err[10] == "T", err
