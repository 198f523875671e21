-- Gantry store schema, version 26 (PostgreSQL; see ../0026_public_sources.sql): the input
-- sources an admin marked public.
CREATE TABLE public_sources (
    url TEXT PRIMARY KEY,
    added_at BIGINT NOT NULL
);
