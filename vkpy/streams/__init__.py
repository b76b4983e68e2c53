"""Sans-IO codecs for the kubelet's streaming protocols (SPDY/3.1 and the channel.k8s.io family).

The kubelet API has to speak the wire protocols that ``kubectl exec``, ``attach`` and
``port-forward`` use through the API server.  Keeping the byte-level work here, free of
asyncio, aiohttp and sockets, lets it be tested and fuzzed in isolation while ``vkpy.api``
does the I/O around it.

Modules:
- channels: The channel.k8s.io family of WebSocket subprotocols as a sans-IO codec, for
  exec, attach and port-forward clients that reach the kubelet over WebSocket instead of
  SPDY.
- remotecommand: What exec, attach and port-forward mean on top of SPDY or WebSocket,
  without the transport.
- spdy: A sans-IO SPDY/3.1 connection codec, because kubectl exec/attach/port-forward
  reach the kubelet over SPDY.
- spdy_dictionary: The SPDY/3 header-compression dictionary, kept apart because it is
  pure data.
- spdy_wire: SPDY/3.1 on the wire: frame layout, header blocks, events and errors.
- ssm_channel: The AWS Session Manager data channel (what ECS Exec speaks) as a sans-IO
  codec.
"""
