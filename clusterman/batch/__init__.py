"""Long-running programs (batches): each wires adapters to the core and loops on a timer."""
