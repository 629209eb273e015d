"""Resource groups: the cloud side of a pool (AWS Auto Scaling groups, Spot Fleets, simulated groups)."""
