"""The GPU check: run by hand on a machine with a GPU (`bash e2e/gpu/run.sh`); never part of pytest."""
