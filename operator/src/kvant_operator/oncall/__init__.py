"""Tools for the engineer on call: `kvant status`."""
