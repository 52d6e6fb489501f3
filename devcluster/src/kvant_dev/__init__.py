"""Kvant's local cluster for tests, e2e and the demo.

Real control-plane binaries plus a process-based node agent.
"""
