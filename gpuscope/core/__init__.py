"""The bottom layer: helpers every process shares (listen addresses, tokens, signals, PostgreSQL: the
embedded server, pools, the migration runner, leader election; time formats, the severity palette).
It imports nothing else of gpuscope."""
