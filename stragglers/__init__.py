"""Straggler detection in running jobs: the detector (pure), the watch over the database, and its collector part."""
