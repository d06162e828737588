-- A slow NIC is named by its port, on nodes with several (rail-optimised: one NIC per GPU).
ALTER TABLE straggler ADD COLUMN port_id integer REFERENCES ib_port;  -- NULL: not a NIC
