"""`gpuscope bench`: the measurements behind the project's targets, printed with the machine they ran on."""
