-- Version 4: ranges_group_updated serves only peer sync's publisher, and
-- every range write pays for it (about 15% of the lease cycle's CPU on a
-- node alone). Peer sync makes it when it starts, and a node started with
-- --nats off drops it (store.DB.PeerIndexes).
DROP INDEX IF EXISTS ranges_group_updated;
