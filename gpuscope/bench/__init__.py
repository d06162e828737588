"""`gpuscope bench`: the measurements behind the targets in DESIGN.md, printed with the machine they ran on."""
