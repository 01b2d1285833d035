"""What ran, measured: usage samples from fabrics and agents, and the hourly rollups dashboards read."""
