"""Straggler detection in running jobs (issue 5)."""
