-- Gantry store schema, version 12 (PostgreSQL; see ../0012_node_network.sql).
ALTER TABLE nodes ADD COLUMN network TEXT NOT NULL DEFAULT 'shared';
