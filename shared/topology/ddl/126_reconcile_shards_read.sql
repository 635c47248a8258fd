-- Reconcile reads the counter shards (the recount's side of the compare)
-- and writes only the Counters rows: a Counters row inserted or updated
-- writes nothing in its interleaved CounterShards, only a deleted one
-- deletes them (ON DELETE CASCADE), and Reconcile deletes no counter. Its
-- role reads the shards and no more (terraform/check derives it from the
-- code, privilege by privilege).
REVOKE INSERT, UPDATE, DELETE ON TABLE CounterShards FROM ROLE fn_reconcile;
