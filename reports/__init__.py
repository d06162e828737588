"""Usage reports: the site's prices and grid, the report API, jobstats, and the scheduled digests."""
