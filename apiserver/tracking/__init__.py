"""``/ml-tracking``: an ML pipeline's MLflow runs and metric histories, read as MLflow's
administrator once the caller's tenant has been checked here."""
