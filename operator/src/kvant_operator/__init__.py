"""Kvant control plane: API models, planner, renderers and kopf handlers (never imports torch)."""
