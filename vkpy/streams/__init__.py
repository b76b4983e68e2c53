"""Sans-IO codecs for the kubelet's streaming protocols (SPDY/3.1 and the channel.k8s.io family).

The kubelet API has to speak the wire protocols that ``kubectl exec``, ``attach`` and
``port-forward`` use through the API server.  Keeping the byte-level work here, free of
asyncio, aiohttp and sockets, lets it be tested and fuzzed in isolation while ``vkpy.api``
does the I/O around it.
"""
