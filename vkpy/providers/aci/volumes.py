"""A pod's volumes as ACI volumes.

ACI has four kinds: emptyDir, secret (files given in the request, base64), Azure
File shares and the retired gitRepo. emptyDir maps as is; the kubelet side resolves
configMap, secret, downwardAPI and projected volumes (service account tokens
included) into files, which become ACI secret volumes (ACI keeps no directories in
them: a file below a directory is refused). An Azure File share is asked for by the
annotation `vkpy.io/aci-azure-file.<volume>: <account>/<share>[:ro]` on a volume
declared as emptyDir, or by the in-tree `azureFile` volume shape (the account's name
and key from the Secret it names, which the kubelet side reads, as Kubernetes does);
a key the Secret lacks comes from the node's `storage_account_keys`. Any other kind
(hostPath, PVCs, NFS, ...) fails the pod with reason UnsupportedVolume.
"""

from __future__ import annotations

import base64

from azure.mgmt.containerinstance import models as m

from vkpy.providers.aci.config import AciConfig
from vkpy.providers.base import PodConfig, VolumeConfig
from vkpy.providers.errors import InvalidInputError

AZURE_FILE = "vkpy.io/aci-azure-file."
FILE_KINDS = ("configMap", "secret", "downwardAPI", "projected")
ACCOUNT_NAME = "azurestorageaccountname"
ACCOUNT_KEY = "azurestorageaccountkey"
"""The keys of the Secret an in-tree azureFile volume names, as Kubernetes reads it."""


def _unsupported(volume: VolumeConfig, why: str) -> InvalidInputError:
    return InvalidInputError(f"volume {volume.name}: {why}", reason="UnsupportedVolume")


def _secret_volume(volume: VolumeConfig) -> m.Volume:
    files: dict[str, str] = {}
    for f in volume.files:
        if "/" in f.path:
            raise _unsupported(
                volume, f"ACI secret volumes hold no directories (item path {f.path!r})"
            )
        files[f.path] = base64.b64encode(f.data).decode()
    return m.Volume(name=volume.name, secret=files)


def _azure_file(
    volume: VolumeConfig, spec: str, config: AciConfig, key: str | None = None
) -> m.Volume:
    read_only = spec.endswith(":ro")
    account, _, share = spec.removesuffix(":ro").partition("/")
    if not account or not share:
        raise _unsupported(volume, f"{AZURE_FILE}{volume.name} must be <account>/<share>[:ro]")
    key = key or config.storage_account_keys.get(account)
    if key is None:
        raise _unsupported(
            volume,
            f"no key for storage account {account!r} (neither in the volume's Secret nor "
            "in the node's storage_account_keys)",
        )
    return m.Volume(
        name=volume.name,
        azure_file=m.AzureFileVolume(
            share_name=share,
            storage_account_name=account,
            storage_account_key=key,
            read_only=read_only or None,
        ),
    )


def build(pod: PodConfig, config: AciConfig) -> tuple[list[m.Volume], list[str]]:
    """The group's volumes and notes; InvalidInputError(UnsupportedVolume) otherwise."""
    annotations = (pod.pod.get("metadata") or {}).get("annotations") or {}
    out: list[m.Volume] = []
    notes: list[str] = []
    for volume in pod.volumes:
        share = annotations.get(AZURE_FILE + volume.name)
        if share is not None:
            out.append(_azure_file(volume, share, config))
        elif volume.kind == "azureFile":
            source = volume.source
            secret = {f.path: f.data.decode(errors="replace").strip() for f in volume.files}
            account = secret.get(ACCOUNT_NAME) or str(source.get("secretName") or "")
            spec = f"{account}/{source.get('shareName')}" + (
                ":ro" if source.get("readOnly") else ""
            )
            out.append(_azure_file(volume, spec, config, secret.get(ACCOUNT_KEY)))
        elif volume.kind == "emptyDir":
            if (volume.source or {}).get("medium") == "Memory":
                notes.append(f"volume {volume.name}: ACI has no memory-backed emptyDir")
            out.append(m.Volume(name=volume.name, empty_dir={}))
        elif volume.kind in FILE_KINDS:
            out.append(_secret_volume(volume))
        else:
            raise _unsupported(
                volume,
                f"ACI cannot mount {volume.kind} volumes (emptyDir, configMap, secret, "
                "downwardAPI, projected and Azure File shares only)",
            )
    return out, notes
