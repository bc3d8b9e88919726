"""DIVE offline: typed tool worlds, reproducible task synthesis verified by replay."""
