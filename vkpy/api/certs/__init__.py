"""The kubelet API's serving certificate and TLS: X.509 work (in a child process),
CSRs to the cluster and their renewal, the opt-in approver, TLS versions and suites.

Modules:
- csr: The serving certificate from the cluster: CSR, approval, issuance, renewal.
- csr_approver: An opt-in approver for vkpy's serving-certificate requests, and nothing
  else.
- serving: Where the serving certificate and the client CA come from, and keeping them
  fresh.
- tls: The TLS side of the kubelet API: one listening context whose certificate can
  change.
- tls_options: Which TLS versions and cipher suites the kubelet API offers, named as the
  kubelet names them.
- x509: X.509 work for the serving certificate: keys, self-signed pairs, CSRs,
  lifetimes.
- x509_work: X.509 work with cryptography, run in a short-lived child process of the
  agent.
"""
