"""exec, attach and port-forward connections as asyncio sessions over the sans-IO
codecs of vkpy.streams: SPDY/3.1 after an HTTP upgrade and the WebSocket channel
protocols, what they hand to backends, and the audit trail.

Modules:
- audit: The audit trail of exec, attach and port-forward: who did what, where, and how
  it ended.
- shared: What the exec, attach and port-forward endpoints share: settings, the idle
  watchdog, metrics, and the rule for turning a backend call into the outcome on the
  error stream.
- spdy_session: An asyncio session around the sans-IO SPDY/3.1 codec, serving one
  upgraded connection.
- stream_io: The pieces of a `StreamIO` that exec, attach and port-forward hand to
  backends.
- stream_request: What the exec, attach and port-forward endpoints check before they
  upgrade a connection.
- upgrade: Taking over an aiohttp HTTP/1.1 connection after `101 Switching Protocols` to
  SPDY/3.1.
- ws_channels: A WebSocket connection speaking one of the channel.k8s.io subprotocols,
  as an asyncio session.
- ws_masking: The one WebSocket rule aiohttp's server does not enforce: client frames
  are masked.
"""
