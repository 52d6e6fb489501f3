"""Renderers: pure functions from a QuantizedModel (+ its plan and artifact) to Kubernetes objects.

They never call the API. The operator applies what they return; `kvant render` prints it.
"""
