"""Stand-ins for hardware libraries this machine may lack, shipped for tests and `gpuscope bench`.

They behave like the real libraries: same function names, the real exception classes, the same
units, and the same failure modes (not supported, GPU lost, library missing).
"""
