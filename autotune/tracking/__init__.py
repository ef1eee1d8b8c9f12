"""MLflow: one parent run per search, one nested run per trial."""
