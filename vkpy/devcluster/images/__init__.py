"""Images built here, for the dev cluster's registry and the tests.

This machine reaches no image registry, so the images `make run`, the tests and the
conformance suite pull are built from what the package registries serve (Debian
packages, Go modules, Python wheels), each into an OCI image layout with umoci and
cached outside the checkout (build.py): busybox, pause, agnhost, nginx and vkpy's
own image. catalogue.py says under which public names each is served; the
registry itself is vkpy/devcluster/registry.py.

Modules:
- agnhost: agnhost: registry.k8s.io/e2e-test-images/agnhost, the conformance suite's
  tool.
- build: Turning a root filesystem into a cached OCI image layout, with umoci.
- busybox: busybox: upstream's busybox 1.35.0, built here from its release source, as
  an OCI image (docker.io/library/busybox).
- catalogue: Which images the dev cluster's registry serves, and under which public
  names.
- debian: Images with a minimal Debian root: nginx, and vkpy's own image for the chart.
- pause: pause: registry.k8s.io/pause, a static program that only waits.
"""

from .build import ImageBuildError, ImageConfig, cache_dir, manifest_digest, size
from .catalogue import Built, Image, all_images, build, names

__all__ = [
    "Built",
    "Image",
    "ImageBuildError",
    "ImageConfig",
    "all_images",
    "build",
    "cache_dir",
    "manifest_digest",
    "names",
    "size",
]
