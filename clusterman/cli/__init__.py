"""The ``clusterman`` command: one module per subcommand, listed in ``main.COMMANDS`` and imported only when run."""
