"""The pure decision loads no configuration machinery: importing it must not pull in staticconf or YAML."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_importing_the_autoscaler_loads_no_yaml_or_staticconf():
    code = (
        "import sys, clusterman.decision, clusterman.cli.plan_input\n"
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('yaml', 'staticconf'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_config_package_still_offers_its_names():
    from clusterman import config

    assert config.load_main_config.__module__ == "clusterman.config.loader"
    assert config.ConfigError.__module__ == "clusterman.core.config_schema"
    assert sorted(config.__all__) == sorted(n for n in config.__all__ if hasattr(config, n))
