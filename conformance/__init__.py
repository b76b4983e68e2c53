"""`make conformance`: Kubernetes' e2e specs against a vkpy node (run.py, report.py)."""
