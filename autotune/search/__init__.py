"""The search: Ray Tune running a constrained Optuna search over a space."""
