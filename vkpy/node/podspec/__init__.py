"""From a pod object to what a backend runs: admission, environment, volumes,
ConfigMaps and Secrets, pull secrets, Services' variables, ephemeral containers.

Modules:
- admission: Pod admission: the checks the kubelet makes before it runs anything of a
  pod.
- config_objects: ConfigMaps and Secrets a pod refers to, looked up with the `optional`
  rule in one place.
- env: Environment variables and `$(VAR)` expansion, resolved the way the kubelet does.
- ephemeral: Ephemeral containers (`kubectl debug`): hand new ones to the backend, or
  say why not.
- pod_config: Building the `PodConfig` a backend runs from a pod object.
- pod_object: What the pod path names a pod by: its ref, its place on the API server, its
  images.
- pull_secrets: A pod's `imagePullSecrets` as registry logins, for backends that pull
  images.
- service_env: The environment variables a kubelet gives containers for the Services of
  their namespace (`enableServiceLinks`, on unless a pod turns it off).
- shared_lists: One LIST answering every caller that asked while an earlier one was on
  the wire.
- volumes: Volume contents resolved the way the kubelet does it, before a backend sees
  them.
"""
