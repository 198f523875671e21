-- Gantry store schema, version 26 (issue 22): the input sources an admin marked public
-- (`gantry cache public add URL`). A node's cached copy of a public source (the URL or one
-- under it) is shared by every team's jobs, one copy per node; any other source is cached per
-- team.
CREATE TABLE public_sources (
    url TEXT PRIMARY KEY,
    added_at INTEGER NOT NULL
);
