-- One owner while the rules change (issue 24).
--
-- normalizer_state is the one row every claim checks: the generation of the
-- stored rules (bumped by every change of the rules in force: an alias
-- added or removed, a binary with a newer rules version starting to serve)
-- and the newest rules version that has served. A claim is keyed under the
-- rules of one generation; the statement that creates its lock calls
-- repolock_rules_guard(generation), which raises RL001 when the stored
-- generation is another one, so that a replica that has not reloaded the
-- rules yet can never create a lock under stale rules: it reloads and keys
-- again. A change of the rules takes SHARE ROW EXCLUSIVE on
-- RepositoryLockOwner first (waiting for every claim in flight, blocking new
-- ones until it commits), so no claim interleaves with it.
CREATE TABLE normalizer_state (
    id          boolean PRIMARY KEY DEFAULT true,
    generation  bigint  NOT NULL DEFAULT 1,
    max_version integer NOT NULL DEFAULT 0,
    CONSTRAINT normalizer_state_one_row CHECK (id),
    CONSTRAINT normalizer_state_generation_positive CHECK (generation > 0)
);
INSERT INTO normalizer_state (id) VALUES (true);

-- repolock_rules_guard(g) is true when g is the stored generation, or 0 (a
-- claim keyed under fixed rules, in tests that do not change the stored
-- rules); otherwise it raises SQLSTATE RL001. VOLATILE: it reads the row
-- with a snapshot of its own, taken when it runs, after the calling
-- statement got its lock on RepositoryLockOwner.
CREATE FUNCTION repolock_rules_guard(g bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    cur bigint;
BEGIN
    IF g = 0 THEN
        RETURN true;
    END IF;
    SELECT generation INTO cur FROM normalizer_state;
    IF cur IS DISTINCT FROM g THEN
        RAISE EXCEPTION 'the keying rules changed (generation % is stored, the claim was keyed under %)', cur, g
            USING ERRCODE = 'RL001';
    END IF;
    RETURN true;
END
$$;

-- A lock's endpoint, host[+port]: the part of its key before the first '/'.
-- An alias change finds the locks it moves through this index, never by
-- walking every lock.
CREATE INDEX repositorylockowner_endpoint_idx ON RepositoryLockOwner (split_part(git_repository_url, '/', 1));

-- Replicas of the release before this one do not call the guard. Once a
-- binary with a newer rules version has served (max_version), a lock keyed
-- under an older version must never be created again, whoever asks: this
-- trigger refuses it (SQLSTATE RL002). It fires only for rows keyed under a
-- version older than 3, the first version that checks the guard itself,
-- so the claims of current binaries never run it.
CREATE FUNCTION repolock_refuse_stale_version() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    newest integer;
BEGIN
    SELECT max_version INTO newest FROM normalizer_state;
    IF NEW.normalizer_version < newest THEN
        RAISE EXCEPTION 'keying rules version % has served: locks keyed under version % are refused (upgrade this replica)', newest, NEW.normalizer_version
            USING ERRCODE = 'RL002';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER repositorylockowner_refuse_stale_version
    BEFORE INSERT ON RepositoryLockOwner
    FOR EACH ROW WHEN (NEW.normalizer_version < 3)
    EXECUTE FUNCTION repolock_refuse_stale_version();
