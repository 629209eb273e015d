"""The ``clusterman`` command: one module per subcommand, registered in ``main.SUBCOMMANDS``."""
