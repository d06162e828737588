-- Power per rack per minute (the sum over the rack's GPUs of each GPU's mean power in that minute),
-- kept with the GPU rollup: the 24-hour rack power chart reads 32 x 1,440 rows, not 1.5 M.
CREATE TABLE rack_power_1m (
    bucket  timestamptz NOT NULL,
    cluster text NOT NULL,
    rack    text NOT NULL,
    watts   double precision NOT NULL,
    gpus    integer NOT NULL,
    PRIMARY KEY (cluster, rack, bucket)
);
