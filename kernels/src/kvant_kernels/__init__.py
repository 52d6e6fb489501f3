"""Kvant numeric core: one module per numeric format."""
