"""Benchmarks (`make bench`): each module measures Gridlane against a baseline side by side in one run
and prints ratios. Nothing here asserts a wall-clock time; tests never time anything."""
