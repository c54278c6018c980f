"""Experiment tracking: each tenant's MLflow account and each ML pipeline's experiment."""
