"""The KubeVirt backend: instances as VirtualMachines on a Kubernetes cluster with KubeVirt,
CDI and Multus, driven through the official `kubernetes` client."""
