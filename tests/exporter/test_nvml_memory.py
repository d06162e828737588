"""Framebuffer memory through nvmlDeviceGetMemoryInfo v2, whose `used` leaves out what the driver reserves
(v1 counts it, so an idle H100 looked ~0.5 GiB busy); v1 where the driver has no v2."""

from __future__ import annotations

from gpuscope.exporter.sources.nvml import NvmlSource
from gpuscope.exporter.testing.fake_nvml import GIB, FakeGpu, make_fake_pynvml


def test_an_idle_gpu_shows_no_memory_used() -> None:
    source = NvmlSource(make_fake_pynvml([FakeGpu(uuid="GPU-idle", fb_used=0)]), xid_events=False)
    values = source.read(0.0)[0][0].values
    assert values["fb_used_bytes"] == 0 and values["fb_total_bytes"] == 80 * GIB
    source.close()


def test_memory_falls_back_to_v1_on_a_driver_without_v2_and_stops_asking_for_v2() -> None:
    gpu = FakeGpu(uuid="GPU-old", fb_used=10 * GIB, unsupported={"memory_v2"})
    fake = make_fake_pynvml([gpu])
    source = NvmlSource(fake, xid_events=False)
    readings = [source.read(float(t))[0][0].values for t in range(3)]
    assert all(r["fb_used_bytes"] == 10 * GIB + gpu.fb_reserved for r in readings), "v1: reserved counts as used"
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 3 + 1, "v2 asked once, then v1 every cycle"
    source.close()
