"""Fixtures for code that talks to the kubelet's pod-resources API: a fake kubelet on a real unix socket."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.k8s.fake_kubelet import FakeKubelet, short_socket_path
from tests.k8s.protos import PodResourcesProtos, load


@pytest.fixture(scope="session")
def podresources() -> PodResourcesProtos:
    """The generated v1 modules: podresources.pb2 (messages), podresources.pb2_grpc (stub, servicer)."""
    return load()


@pytest.fixture
def kubelet_socket() -> Iterator[str]:
    """A fresh, short path for a kubelet socket (unix socket paths must stay under 108 bytes)."""
    with short_socket_path() as path:
        yield path


@pytest.fixture
def fake_kubelet(kubelet_socket: str) -> Iterator[FakeKubelet]:
    """A started FakeKubelet with no pods; dial fake_kubelet.target. Stopped (socket removed) afterwards."""
    with FakeKubelet(kubelet_socket) as kubelet:
        yield kubelet
