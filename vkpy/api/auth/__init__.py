"""Who may call the kubelet API and what they may do: every request passes the
middleware here before a handler runs.

Modules:
- authn: Who is calling the kubelet API: client certificates, bearer tokens, anonymous.
- authz: What a caller may do on the kubelet API: the kubelet's SubjectAccessReview
  rules.
- middleware: The checks every kubelet API request passes before a handler runs.
- ttl_cache: A small expiring cache for authentication and authorization answers.
"""
