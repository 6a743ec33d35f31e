"""Container disks: KubeVirt's containerDisk images (a layer holding /disk/<file>.qcow2 or
.img) pulled from an OCI registry with skopeo, verified, and cached once per digest."""
