-- Gantry store schema, version 12: how each node runs its jobs' network, as its agent registers
-- it: `cni` (a network namespace per attempt, set up by the CNI plugins) or `shared` (jobs share
-- the node's network: the agent is not root or has no plugins). Nodes registered before say
-- nothing and are `shared` until they register again.
ALTER TABLE nodes ADD COLUMN network TEXT NOT NULL DEFAULT 'shared';
