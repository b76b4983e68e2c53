"""vkpy's side commands, run as their own processes (`python -m vkpy.tools.<name>`):
the chart's CSR approver and uninstall hook, and what they share.

Modules:
- approver: `python -m vkpy.tools.approver`: approve vkpy's serving-certificate CSRs,
  refuse the rest.
- command: What vkpy's small in-cluster commands share: the chart's uninstall hook
  (`python -m vkpy.tools.uninstall`) and CSR approver (`python -m vkpy.tools.approver`).
- uninstall: `python -m vkpy.tools.uninstall`: take a virtual node out of the cluster,
  leaving nothing.
"""
