"""MLflow: one parent run per search, one nested run per trial."""

import os

# MLflow's usage telemetry is off unless the user asks for it. On a machine without internet (a GPU
# cluster, CI) its config fetch fails in a background thread, which then pops
# _MLFLOW_TELEMETRY_SESSION_ID from os.environ while the main thread may be iterating os.environ
# for an HTTP request (proxy lookup): that request then fails with KeyError
# '_MLFLOW_TELEMETRY_SESSION_ID', which failed an `autotune sync` once. Set before any MLflow import
# (every one in autotune is under this package); an explicit MLFLOW_DISABLE_TELEMETRY is kept.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
