"""The fake kubelet's fixtures (tests/k8s), for the exporter's Kubernetes attribution tests."""

from tests.k8s.conftest import fake_kubelet, kubelet_socket, podresources  # noqa: F401
