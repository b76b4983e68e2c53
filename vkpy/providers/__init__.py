"""Backends that run pods: the contract in `base`, typed errors in `errors`, one
subpackage per backend, and `registry` to pick one by name."""
