"""One GPU, one line style, on every chart of a node's page: picked by the GPU's index, not by the trace's
place in its figure. Plotly colours traces in order, so in a figure of small multiples (one panel per
metric, one line per GPU) the second panel's first line took the colour after the first panel's last, and
a chart without some GPUs' lines (NVLink not reported, one GPU shown) shifted every colour after them."""

from __future__ import annotations

from plotly.colors import qualitative

PALETTE = qualitative.Plotly  # Plotly's own ten colours: they read on the light and the dark scheme
# Nodes with more GPUs than colours: the next ten dashed, then dotted.
DASHES = ("solid", "dash", "dot")


def gpu_line(index: int) -> dict[str, str]:
    """The line style of the GPU with this index on its node."""
    colours = len(PALETTE)
    return {"color": PALETTE[index % colours], "dash": DASHES[index // colours % len(DASHES)]}
