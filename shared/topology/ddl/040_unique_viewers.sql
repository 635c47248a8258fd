-- Unique viewers (shared/counter/viewers.go): a HyperLogLog++ sketch of the
-- distinct signed-in users who recorded a watch of the video, sharded like
-- the counted fields: the consumer merges a batch's viewers into the sketch
-- of the shard it writes, the rollup merges the shards' sketches into the
-- snapshot's, and a read merges the snapshot's with the live shards'. NULL is
-- the empty sketch. Added columns, so that an existing database takes them
-- as an update (google_spanner_database.ddl appends statements).
ALTER TABLE Counters ADD COLUMN Viewers BYTES(MAX);

ALTER TABLE CounterShards ADD COLUMN Viewers BYTES(MAX);
