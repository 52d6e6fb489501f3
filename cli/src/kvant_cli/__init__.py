"""The `kvant` command: a dispatcher that each installed Kvant package extends."""
