"""Example training scripts run by tfcluster."""
