"""The `vkpy` command: flags to settings (cli), the wiring of settings to a node host
(runner), and the process tuning the agent applies at start (event loop, garbage
collector pauses, event-loop lag).

Modules:
- cli: The command line: `python -m vkpy --kubeconfig ... --node-name ... --provider
  ...`.
- event_loop: Which asyncio event loop runs vkpy: the standard one or uvloop (`--event-
  loop`).
- gc_pauses: Keeps the cyclic garbage collector's pauses short and bounded: the agent
  runs the collector on its own schedule.
- loop_lag: Measures how late the event loop runs what is ready
  (`vkpy_event_loop_lag_seconds`).
- runner: Wiring: settings to a node host (vkpy.fleet.host) and its membership;
  signals, health probes and the exit status.
"""
