-- Gantry store schema, version 14: priority has limits. `teams.max_priority` is the highest
-- priority the team's members may submit at (NULL: 100); `teams.preempt_other_teams` (0/1,
-- NULL: 0) whether its jobs may preempt other teams' jobs by priority. Without it, across
-- teams preemption only reclaims guarantees (Slurm's QOS `Preempt` list, KAI's in-quota vs
-- over-quota).
ALTER TABLE teams ADD COLUMN max_priority INTEGER;
ALTER TABLE teams ADD COLUMN preempt_other_teams INTEGER;
