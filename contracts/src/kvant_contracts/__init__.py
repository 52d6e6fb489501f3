"""What the operator (no torch) and the runtime (no kopf) exchange or must decide alike, defined once.

Each module says its own contract; docs/contributing.md ("Layout", the `contracts/` row) lists them
all, held to this package by tests/unit/test_contracts_are_all_documented.py.
"""
