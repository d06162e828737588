"""The evidence rules, one per file, each documented in its docstring: what it reads, its threshold, why,
and where the threshold comes from. health/evidence.py runs them all over one window.

xid.py (XIDs through the catalogue), ecc.py (uncorrectable ECC), remap.py (row remap pending or failed),
recovery.py (the driver's own recovery action, preferred over the catalogue for XIDs),
gpu_lost.py (a GPU that stopped answering), nvlink.py and ib_flap.py (link flaps over a window),
thermal.py (slowdown at normal load), straggler.py (the same GPU slow in different jobs). They share
one pass over the window's GPU samples (gpu_steps.py), the GPUs' and ports' names (places.py) and
threshold crossings over a trailing window (crossing.py)."""
