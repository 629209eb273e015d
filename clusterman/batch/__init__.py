"""The long-running programs: the autoscaler bootstrap (and, later, the autoscaler and collectors)."""
