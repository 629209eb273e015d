"""A program supervisord cannot start at all is said, naming it, not left STOPPED in silence.

supervisord answers a command it cannot find in the result of ``startProcessGroup`` (``NO_FILE``),
logs nothing and leaves the process STOPPED, ``spawnerr`` empty: the bootstrap then waited for the
signals for a minute and blamed them (``not answering after 60 s: ... (STOPPED)``).
"""

from __future__ import annotations

import os

import pytest

from clusterman.tree.supervisor import Supervisor
from clusterman.tree.supervisor import SupervisorError

CONFIG = """
[supervisord]
nodaemon=true
logfile={dir}/supervisord.log
pidfile={dir}/supervisord.pid
[unix_http_server]
file={dir}/supervisor.sock
chmod=0700
[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
[program:run_signals]
command={command} %(process_num)d
process_name=%(program_name)s_%(process_num)d
numprocs=1
autostart=false
stdout_logfile={dir}/run_signals.log
"""


def test_a_command_supervisord_cannot_find_is_an_error_naming_it(tmp_path):
    private = tmp_path / "tree"
    private.mkdir(mode=0o700)
    # a path with a space, split by supervisord as a shell would when not quoted
    (tmp_path / "with space").mkdir()
    config = tmp_path / "supervisord.conf"
    config.write_text(CONFIG.format(dir=private, command=tmp_path / "with space" / "runner"))
    supervisor = Supervisor(config, private, dict(os.environ))
    supervisor.start(15)
    try:
        with pytest.raises(SupervisorError, match=r"cannot start run_signals:run_signals_0: NO_FILE: .*with'"):
            supervisor.start_group("run_signals")
    finally:
        supervisor.stop(15)
