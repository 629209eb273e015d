"""The ``clusterman`` command: one module per subcommand, found by ``main.subcommands()``."""
